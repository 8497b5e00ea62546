"""A tool token that ended stays ended: the database refuses an UPDATE that clears or moves a
token's ``revoked_at``, pushes its ``expires_at`` later, widens what it is bound to or may do,
or changes its digest. Whatever the code path, a credential that ended cannot start again,
and a live one cannot outgrow what it was minted for."""

from django.db import migrations

FORWARD = """
CREATE FUNCTION sessions_app_tooltoken_end_is_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS DISTINCT FROM OLD.revoked_at THEN
        RAISE EXCEPTION 'an ended tool token stays ended' USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.expires_at > OLD.expires_at THEN
        RAISE EXCEPTION 'a tool token''s expiry never moves later'
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.token_hash IS DISTINCT FROM OLD.token_hash OR NEW.prefix IS DISTINCT FROM OLD.prefix
       OR NEW.app_id IS DISTINCT FROM OLD.app_id OR NEW.session_id IS DISTINCT FROM OLD.session_id
       OR NEW.function_call_id IS DISTINCT FROM OLD.function_call_id
       OR NOT (NEW.capabilities <@ OLD.capabilities) THEN
        RAISE EXCEPTION 'a tool token''s binding never changes' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER tooltoken_end_is_final BEFORE UPDATE ON sessions_app_tooltoken
    FOR EACH ROW EXECUTE FUNCTION sessions_app_tooltoken_end_is_final();
"""

REVERSE = """
DROP TRIGGER IF EXISTS tooltoken_end_is_final ON sessions_app_tooltoken;
DROP FUNCTION IF EXISTS sessions_app_tooltoken_end_is_final();
"""


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0008_end_answered_tool_tokens")]

    operations = [migrations.RunSQL(FORWARD, reverse_sql=REVERSE)]
