# The lexical vector (``search``) stays in the row too. With the embedding in the row
# (0004), a typical entry is about 2.2 kB, past PostgreSQL's default TOAST target of about
# 2 kB, so the toaster moved ``search`` (the largest value left) out of line: three of four
# entries of the benchmark's scope had it in the TOAST table, and BM25 scoring fetched it
# from there once per expression that reads it (five buffer reads per candidate instead of
# one). Rows now go to TOAST only past 4,080 bytes, and then ``search`` (storage MAIN) is the
# last value moved out. On the benchmark's worst query (9,191 candidates in a scope of
# 100,000) the scoring statement went from 63 ms to 20 ms. Rows written before this keep an
# out-of-line ``search`` until they are rewritten: ``manage.py reembed`` does it (which the
# upgrade to hashing-v2 needs anyway).

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0005_outbox"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE memory_memoryentry ALTER COLUMN search SET STORAGE MAIN; "
            "ALTER TABLE memory_memoryentry SET (toast_tuple_target = 4080)",
            "ALTER TABLE memory_memoryentry ALTER COLUMN search SET STORAGE EXTENDED; "
            "ALTER TABLE memory_memoryentry RESET (toast_tuple_target)",
        ),
    ]
