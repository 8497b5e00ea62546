# What is derived from an entry's content is derived from its NFC form (the content itself
# is stored as sent), and runs of Chinese, Japanese and Korean characters, which the
# ``english`` parser takes as one word each, are indexed as their characters and character
# pairs beside the configuration's lexemes: ``memory_search_vector`` is the one definition,
# used by every writer and by the query side (``query => true``: pairs, or the character of
# a one-character run). Existing entries: the lexical vector of every entry whose content is
# not plain ASCII (the only ones it can change) is computed again, the statistics triggers
# following; the vector of every entry whose content is not in NFC is cleared, and the
# embedding task (or ``manage.py reembed``) embeds it again from the NFC form.

from django.conf import settings
from django.db import migrations

# Han (with extension A, the compatibility ideographs and the supplementary planes),
# hiragana, katakana (with its phonetic extensions and the half-width forms), Hangul
# syllables and jamo.
CJK = (
    "[\\u3040-\\u30ff\\u31f0-\\u31ff\\u3400-\\u4dbf\\u4e00-\\u9fff\\uf900-\\ufaff"
    "\\uff66-\\uff9f\\uac00-\\ud7af\\u1100-\\u11ff\\u3130-\\u318f"
    "\\U00020000-\\U0003134f]+"
)

# Text without those characters (most of it) takes the short way: the configuration's
# lexemes of its NFC form, about 17 µs for a sentence where ``to_tsvector`` alone takes 11.
FUNCTION = f"""
CREATE FUNCTION memory_search_vector(config regconfig, content text, query boolean DEFAULT false)
RETURNS tsvector LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    nfc text := normalize(content, NFC);
BEGIN
    IF nfc !~ '{CJK}' THEN
        RETURN to_tsvector(config, nfc);
    END IF;
    RETURN to_tsvector(config, regexp_replace(nfc, '{CJK}', ' ', 'g'))
        || array_to_tsvector(ARRAY(
               SELECT DISTINCT substr(m.parts[1], i, g.n)
                 FROM regexp_matches(nfc, '{CJK}', 'g') AS m(parts),
                      generate_series(1, length(m.parts[1])) AS i,
                      (VALUES (1), (2)) AS g(n)
                WHERE i + g.n - 1 <= length(m.parts[1])
                  AND (g.n = 2 OR NOT query OR length(m.parts[1]) = 1)));
END $$;
"""


def recompute(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memory_memoryentry SET search = memory_search_vector(%s::regconfig, content) "
            "WHERE content ~ '[^\\x01-\\x7f]' "
            "AND search IS DISTINCT FROM memory_search_vector(%s::regconfig, content)",
            [settings.CTXADMIN_MEMORY_TS_CONFIG] * 2,
        )
        cursor.execute(
            "UPDATE memory_memoryentry SET embedding = NULL, embedding_model = '', "
            "embed_failures = 0 WHERE embedding IS NOT NULL AND content IS NOT NFC NORMALIZED"
        )


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0011_scope_index_retry'),
    ]

    operations = [
        migrations.RunSQL(
            FUNCTION, "DROP FUNCTION IF EXISTS memory_search_vector(regconfig, text, boolean)"
        ),
        migrations.RunPython(recompute, migrations.RunPython.noop),
    ]
