"""A revoked API key stays revoked: the database refuses an UPDATE that clears or moves a
key's ``revoked_at``, or changes the digest a key is checked against. Whatever the code path
(the console, a script, a later bug), a credential that ended cannot start again."""

from django.db import migrations

FORWARD = """
CREATE FUNCTION ctxadmin_apikey_end_is_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS DISTINCT FROM OLD.revoked_at THEN
        RAISE EXCEPTION 'a revoked API key stays revoked' USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.key_hash IS DISTINCT FROM OLD.key_hash OR NEW.prefix IS DISTINCT FROM OLD.prefix THEN
        RAISE EXCEPTION 'an API key''s digest never changes' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER apikey_end_is_final BEFORE UPDATE ON ctxadmin_apikey
    FOR EACH ROW EXECUTE FUNCTION ctxadmin_apikey_end_is_final();
"""

REVERSE = """
DROP TRIGGER IF EXISTS apikey_end_is_final ON ctxadmin_apikey;
DROP FUNCTION IF EXISTS ctxadmin_apikey_end_is_final();
"""


class Migration(migrations.Migration):
    dependencies = [("ctxadmin", "0003_operator_groups")]

    operations = [migrations.RunSQL(FORWARD, reverse_sql=REVERSE)]
