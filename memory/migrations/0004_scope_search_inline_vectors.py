# Lexical search is always inside one (app, user) scope: its GIN index leads with the scope
# (btree_gin), so a search reads the postings of its own scope only, not everyone's.
#
# The embedding is kept in the row (storage PLAIN): pgvector's default, EXTERNAL, moves it to
# the TOAST table as soon as a row passes about 2 kB, which an entry's content and tsvector
# often make it do, and an exact scan of a scope then costs one TOAST lookup per entry. A
# 384-dimension vector is 1,544 bytes; content and tsvector are still compressed and moved
# out first. Rows written before this keep their out-of-line vectors until rewritten (for
# example by `manage.py reembed --all`).

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.operations import BtreeGinExtension
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("memory", "0003_lexical_statistics"),
    ]

    operations = [
        BtreeGinExtension(),
        migrations.RemoveIndex(model_name="memoryentry", name="memory_search"),
        migrations.AddIndex(
            model_name="memoryentry",
            index=GinIndex(fields=["app", "user_id", "search"], name="memory_scope_search"),
        ),
        migrations.RunSQL(
            "ALTER TABLE memory_memoryentry ALTER COLUMN embedding SET STORAGE PLAIN",
            "ALTER TABLE memory_memoryentry ALTER COLUMN embedding SET STORAGE EXTERNAL",
        ),
    ]
