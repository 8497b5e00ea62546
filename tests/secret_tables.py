"""The tables the secret detectors are held to: key names that name a credential and
ordinary key names that must survive pruning; credential-bearing texts and ordinary texts.

Every credential here is fake: built at run time from a fixed seed, in the real format of
its issuer (prefix, alphabet, length), so no file holds one whole.
"""

from __future__ import annotations

import base64
import random
import string


def fullwidth(text: str) -> str:
    """``text`` in fullwidth forms (NFKC folds them back)."""
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


# ----------------------------------------------------------------------------- key names

# Real-world names of credentials: AWS, GCP, Azure, Stripe, GitHub, Slack, Django, OAuth,
# JDBC and connection strings, Kubernetes, HTTP headers, environment variables, ADK state.
# fmt: off
SECRET_KEYS = [
    # the list
    "secret_key", "aws_secret_access_key", "secretAccessKey", "access_key", "token",
    "api_token", "github_token", "bearer", "jwt", "credentials", "auth", "pwd",
    "passphrase", "signing_key", "private_key_id", "connection_string", "dsn", "sessionid",
    "csrftoken", "api_keys", "secrets", "passwords", "cookies", "pass\u200bword",
    # generic
    "password", "Password", "PASSWORD", "passwd", "user_password", "db_password",
    "DB_PASSWORD", "dbpassword", "PassWord", "new_password", "old_password",
    "password_confirmation", "password1", "admin_pass", "db_pass", "smtp_pass",
    "SMTP_PASSWORD", "REDIS_PASSWORD", "MYSQL_ROOT_PASSWORD", "POSTGRES_PASSWORD",
    "passcode", "passkey", "pin_code", "secret", "Secret", "client_secret", "clientSecret",
    "CLIENT_SECRET", "app_secret", "consumer_secret", "webhook_secret", "jwt_secret",
    "JWT_SECRET_KEY", "SECRET_KEY", "DJANGO_SECRET_KEY", "SESSION_SECRET", "totp_secret",
    "otp", "mnemonic", "seed_phrase", "recovery_codes", "backup_codes", "credential",
    "creds", "user:password", "app:client_secret", "temp:access_token",
    # API keys
    "api_key", "apiKey", "API_KEY", "api-key", "ApiKey", "APIKEY", "apikey", "x-api-key",
    "X-API-KEY", "openai_api_key", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GOOGLE_API_KEY",
    "GEMINI_API_KEY", "x-goog-api-key", "SENDGRID_API_KEY", "MAILGUN_API_KEY",
    "STRIPE_SECRET_KEY", "stripe_secret_key", "license_key", "master_key", "encryption_key",
    "ENCRYPTION_KEY", "decryption_key", "hmac_key", "shared_key", "client_key",
    "client-key-data", "subscription_key", "Ocp-Apim-Subscription-Key", "x-functions-key",
    "app_key", "deploy_key", "ssh_key", "ssh_private_key", "private_key", "privateKey",
    "PRIVATE_KEY", "gpg_key", "write_key", "admin_key", "user_key", "session_key",
    "apiKeys",
    # AWS, Azure, GCP
    "aws_access_key_id", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "SecretAccessKey",
    "AccessKeyId", "SessionToken", "x-amz-security-token", "AccountKey", "account_key",
    "storage_account_key", "AZURE_CLIENT_SECRET", "AZURE_STORAGE_CONNECTION_STRING",
    "SharedAccessKey", "SharedAccessSignature", "sas_token", "ConnectionStrings",
    "connectionString", "conn_str", "GOOGLE_APPLICATION_CREDENTIALS",
    "service_account_credentials",
    # tokens
    "access_token", "accessToken", "ACCESS_TOKEN", "refresh_token", "refreshToken",
    "id_token", "idToken", "auth_token", "authToken", "AUTH_TOKEN", "session_token",
    "bearer_token", "bearerToken", "oauth_token", "oauth_token_secret", "oauthToken",
    "personal_access_token", "GITHUB_TOKEN", "GH_TOKEN", "gitlab_token", "private_token",
    "PRIVATE-TOKEN", "slack_bot_token", "SLACK_BOT_TOKEN", "bot_token", "app_token",
    "NPM_TOKEN", "npm_token", "PYPI_TOKEN", "HF_TOKEN", "hf_token", "VAULT_TOKEN",
    "vault_token", "kube_token", "device_token", "reset_token", "verification_token",
    "csrf_token", "x-csrf-token", "XSRF-TOKEN", "csrfmiddlewaretoken", "accesstoken",
    "githubtoken", "tokens", "Token", "TOKEN", "upstream.idToken",
    # HTTP and sessions
    "Authorization", "authorization", "Proxy-Authorization", "x-auth-token",
    "authorization_code", "auth_code", "auth_key", "cookie", "Cookie", "Set-Cookie",
    "set-cookie", "setCookie", "cookie_jar", "session_cookie", "PHPSESSID", "JSESSIONID",
    # URLs that carry passwords, DSNs
    "database_url", "DATABASE_URL", "db_url", "redis_url", "REDIS_URI", "mongodb_uri",
    "MONGO_URI", "SQLALCHEMY_DATABASE_URI", "CELERY_BROKER_URL", "broker_url", "jdbc_url",
    "sentry_dsn", "SENTRY_DSN", "DSN",
    # containers of credentials
    "auth_config", "requested_auth_configs", "authConfig", "basic_auth", "basicauth",
    "http_auth", "imagePullSecrets", "secretKeyRef", "secret_name", "jwt_token",
    # round three: short spellings, key material, webhooks, one-time codes, other languages
    "pass", "pw", "pswd", "privkey", "priv_key", "tls_key", "ssl_key", "KeyMaterial",
    "service_account_json", "github_pat", "SLACK_WEBHOOK_URL", "webhook_url", "magic_link",
    "code_verifier", "client_assertion", "SAMLResponse", "mfa_code", "2fa_code",
    "one_time_code", "recovery_phrase", "xprv", "laravel_session", "_csrf", "mot_de_passe",
    "wachtwoord", "パスワード", "密碼", "authorisation", "DISCORD_WEBHOOK_URL", "gitlab_pat",
    "otp_code", "xsrf", "user_pw", "ユーザーパスワード", "用户密码", "비밀번호", "lösenord",
    "contraseña", "DB_CONTRASEÑA", "hasło", "passwörter",
]

# Ordinary keys that must survive: ADK events and actions, Gemini, OpenAI and Anthropic
# usage and generation fields, ctxadmin's own fields, and everyday words containing a
# credential word's letters.
ORDINARY_KEYS = [
    # token counting: ADK usage_metadata, Gemini, OpenAI, Anthropic, rate-limit headers
    "token_count", "max_tokens", "maxTokens", "max_output_tokens", "maxOutputTokens",
    "max_completion_tokens", "max_prompt_tokens", "max_new_tokens", "min_tokens",
    "input_tokens", "output_tokens", "total_tokens", "prompt_tokens", "completion_tokens",
    "reasoning_tokens", "cached_tokens", "audio_tokens", "text_tokens", "image_tokens",
    "accepted_prediction_tokens", "rejected_prediction_tokens", "prompt_tokens_details",
    "completion_tokens_details", "cache_creation_input_tokens", "cache_read_input_tokens",
    "prompt_token_count", "candidates_token_count", "total_token_count",
    "cached_content_token_count", "thoughts_token_count", "tool_use_prompt_token_count",
    "promptTokenCount", "candidatesTokenCount", "totalTokenCount",
    "cachedContentTokenCount", "thoughtsTokenCount",
    "cache_tokens_details", "candidates_tokens_details", "tokensPerMinute",
    "tokens_per_minute", "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens", "budget_tokens", "thinking_budget", "min_prefix_tokens",
    "bytes_per_token", "tokenizer", "tokenize", "tokenized_text", "token_type", "token_uri",
    "token_url", "token_endpoint", "token_expiry", "tokenExpiresAt", "token_limit",
    "token_usage", "token_estimate", "token_budget", "usage_metadata", "usage",
    # ADK events, actions and parts
    "author", "invocation_id", "event_id", "branch", "partial", "turn_complete",
    "interrupted", "error_code", "error_message", "grounding_metadata", "custom_metadata",
    "long_running_tool_ids", "actions", "skip_summarization", "state_delta",
    "artifact_delta", "transfer_to_agent", "escalate", "requested_tool_confirmations",
    "compaction", "end_of_agent", "agent_state", "rewind_before_invocation_id",
    "function_call", "function_response", "id", "name", "args", "response",
    "will_continue", "thought", "thought_signature", "thoughtSignature", "inline_data",
    "mime_type", "file_data", "file_uri", "display_name", "executable_code",
    "code_execution_result", "video_metadata", "session_id", "sessionId", "user_id",
    "app_name", "traffic_type", "modality",
    # generation config and requests
    "temperature", "top_p", "top_k", "candidate_count", "stop_sequences", "seed",
    "presence_penalty", "frequency_penalty", "response_mime_type", "response_schema",
    "thinking_config", "include_thoughts", "safety_settings", "cached_content", "labels",
    "tool_config", "function_calling_config", "allowed_function_names",
    "system_instruction", "http_options", "headers", "model", "messages", "role",
    "content", "tool_calls", "tool_call_id", "arguments", "logit_bias", "response_format",
    "parallel_tool_calls", "reasoning_effort", "service_tier", "system_fingerprint",
    "finish_reason", "stop_reason", "stop_sequence", "cache_control", "signature",
    "tool_choice", "is_error", "api_version", "apiVersion", "api_base", "base_url",
    # ctxadmin's own fields
    "idempotency_key", "cache_key", "scope_fingerprint", "retain_recent_exchanges",
    "token_threshold", "event_threshold", "capabilities", "tool_name", "function_call_id",
    "ttl_ms", "metadata", "provenance", "erasure_epoch",
    # ordinary words and identifiers
    "key", "keys", "Key", "value", "keyword", "keywords", "keyboard", "keynote", "monkey",
    "turkey", "hockey", "whiskey", "passage", "passenger", "passengers", "passport",
    "passport_number", "boarding_pass", "compass", "bypass", "secretary",
    "secretary_name", "authority", "authorities", "authored_by", "co_author", "authorship",
    "authors", "is_authenticated", "oauth", "oauth_scopes", "query", "cookbook", "passive",
    "primary_key", "foreign_key", "public_key", "publishable_key", "partition_key",
    "sort_key", "object_key", "kms_key_id", "ssh_public_key", "key_id", "client_id",
    "clientId", "client_email", "project_id", "tenant_id", "subscription_id",
    "account_id", "account_name", "username", "user", "email", "login", "auth_uri",
    "auth_type", "auth_provider_x509_cert_url", "cookie_domain", "cookie_consent",
    "authorization_endpoint", "jwks_uri", "x-hub-signature", "x-amz-date",
    "certificate-authority-data", "serviceAccountName", "callback_url", "image_url",
    "thread_id", "checkpoint_id", "sid", "account_sid", "hash", "digest",
    # near the round-three names
    "boarding_pass_id", "pass_count", "passes", "time_code", "timecode", "code_challenge",
    "code_challenge_method", "csrf_enabled", "mfa_enabled", "2fa_enabled", "webhook_id",
    "webhook_events", "magic_number", "saml_enabled", "tls_version", "ssl_verify",
    "session_state", "パス", "パスポート番号", "密度", "用户名", "mot_cle", "motto", "größe",
]
# fmt: on


# ----------------------------------------------------------------------------- texts


class Fakes:
    """Fake credentials in their issuers' formats, from a fixed seed."""

    def __init__(self, seed: int = 20261201):
        self.random = random.Random(seed)

    def chars(self, alphabet: str, n: int) -> str:
        return "".join(self.random.choice(alphabet) for _ in range(n))

    def alnum(self, n: int) -> str:
        return self.chars(string.ascii_letters + string.digits, n)

    def b64(self, n: int) -> str:
        return self.chars(string.ascii_letters + string.digits + "+/", n)

    def url(self, n: int) -> str:
        return self.chars(string.ascii_letters + string.digits + "-_", n)

    def hex(self, n: int) -> str:
        return self.chars("0123456789abcdef", n)

    def aws_secret(self) -> str:
        while True:
            value = self.b64(40)
            if any(c.islower() for c in value) and any(c.isupper() for c in value):
                if any(c.isdigit() for c in value):
                    return value

    def jwt(self) -> str:
        def part(obj: str) -> str:
            return base64.urlsafe_b64encode(obj.encode()).decode().rstrip("=")

        header = part('{"alg":"HS256","typ":"JWT"}')
        body = part('{"sub":"' + self.alnum(10) + '","iat":1700000000}')
        return f"{header}.{body}.{self.url(43)}"

    def fullwidth(self, text: str) -> str:
        return fullwidth(text)


def credential_texts(fakes: Fakes | None = None) -> list[tuple[str, str, str]]:
    """(label, text, secret) triples: each text carries one credential, written as people and
    tools write it; ``secret`` is its random part (what must never come out)."""
    f = _Recording(fakes or Fakes())
    pw = "Tr0ub4dor&" + f.alnum(6)
    basic = base64.b64encode(f"alice:{pw}".encode()).decode()
    # fmt: off
    texts = [
        ("json api_key", '{"api_key": "' + f.alnum(32) + '"}'),
        ("json apiKey compact", '{"apiKey":"' + f.alnum(32) + '","region":"eu"}'),
        ("json password pretty", '{\n  "password": "' + pw + '"\n}'),
        ("json client_secret", '{"client_id": "abc", "client_secret": "' + f.alnum(24) + '"}'),
        ("python dict", "{'password': '" + pw + "'}"),
        ("php array", "['api_key' => '" + f.alnum(24) + "']"),
        ("yaml", "database:\n  password: " + pw + "\n"),
        ("env", "export OPENAI_API_KEY=" + f.alnum(40)),
        ("env db password", "DB_PASSWORD=" + pw),
        ("toml", 'secret_key = "' + f.alnum(50) + '"'),
        ("cli flag", "mysql --password " + pw + " -h db"),
        ("cli flag equals", "run --api-key=" + f.alnum(32)),
        ("xml", "<password>" + pw + "</password>"),
        ("query string", "GET /cb?access_token=" + f.url(40) + "&state=1"),
        ("connection string", "Server=db;Database=app;User Id=sa;Password=" + pw + ";"),
        ("odbc", "DRIVER={ODBC};UID=sa;PWD=" + pw + ";"),
        ("azure storage", "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey="
         + f.b64(86) + "==;EndpointSuffix=core.windows.net"),
        ("azure sas", "https://acct.blob.core.windows.net/c/b?sv=2022-11-02&sig="
         + f.b64(43) + "%3D"),
        ("aws secret assigned", "aws_secret_access_key = " + f.aws_secret()),
        ("aws secret alone", "the key is " + f.aws_secret() + " for prod"),
        ("aws key id", "AKIA" + f.chars(string.ascii_uppercase + string.digits, 16)),
        ("aws session id", "ASIA" + f.chars(string.ascii_uppercase + string.digits, 16)),
        ("stripe live", "charge with sk_live_" + f.alnum(24)),
        ("stripe test", "use sk_test_" + f.alnum(24) + " in staging"),
        ("stripe restricted", "rk_live_" + f.alnum(24)),
        ("stripe webhook", "whsec_" + f.alnum(32)),
        ("openai", "sk-proj-" + f.url(48)),
        ("anthropic", "sk-ant-api03-" + f.url(80)),
        ("slack bot", "xoxb-" + f.chars(string.digits, 12) + "-" + f.chars(string.digits, 13)
         + "-" + f.alnum(24)),
        ("slack user", "xoxp-" + f.chars(string.digits, 12) + "-" + f.alnum(30)),
        ("slack app", "xapp-1-A" + f.chars(string.ascii_uppercase + string.digits, 10) + "-"
         + f.chars(string.digits, 13) + "-" + f.hex(64)),
        ("slack webhook", "https://hooks.slack.com/services/T" + f.alnum(10) + "/B"
         + f.alnum(10) + "/" + f.alnum(24)),
        ("jwt", "token: " + f.jwt()),
        ("jwt alone", "here it is " + f.jwt()),
        ("github classic", "ghp_" + f.alnum(36)),
        ("github oauth", "gho_" + f.alnum(36)),
        ("github fine-grained", "github_pat_" + f.alnum(22) + "_" + f.alnum(59)),
        ("gitlab", "glpat-" + f.url(20)),
        ("google api key", "AIza" + f.url(35)),
        ("google oauth", "Authorization header was ya29." + f.url(120)),
        ("google refresh", "refresh with 1//0" + f.url(60)),
        ("authorization bearer", "Authorization: Bearer " + f.url(40)),
        ("authorization basic", "Authorization: Basic " + basic),
        ("basic alone", "send Basic " + basic + " to the proxy"),
        ("authorization token scheme", "authorization: Token " + f.alnum(40)),
        ("proxy authorization", "Proxy-Authorization: Basic " + basic),
        ("bearer in text", "use bearer " + f.url(32) + " for it"),
        ("cookie header", "Cookie: sessionid=" + f.alnum(32) + "; csrftoken=" + f.alnum(32)),
        ("set-cookie", "Set-Cookie: session=" + f.alnum(40) + "; HttpOnly"),
        ("postgres url", "postgres://app:" + pw + "@db.internal:5432/app"),
        ("postgresql url", "DATABASE_URL=postgresql://admin:" + f.alnum(16) + "@10.0.0.5/prod"),
        ("redis url", "redis://:" + f.alnum(24) + "@cache:6379/0"),
        ("mongodb srv", "mongodb+srv://root:" + f.alnum(16) + "@cluster0.mongodb.net/db"),
        ("amqp url", "amqp://guest:" + f.alnum(12) + "@rabbit:5672//"),
        ("https userinfo", "https://deploy:" + f.alnum(20) + "@git.example.com/repo.git"),
        ("my password is", "my password is " + pw),
        ("my password is word", "my password is bluebird" + f.chars(string.ascii_lowercase, 4)),
        ("our wifi password", "our wifi password is sun" + f.chars(string.ascii_lowercase, 5)),
        ("the api key was", "The API key was: " + f.alnum(32)),
        ("the password is symbols", "the password is " + pw),
        # Six digits: a four-digit secret would turn up by chance in the random hex around it.
        ("my pin is", "my pin is " + f.chars(string.digits, 6)),
        ("my token is", "my token is " + f.url(30)),
        ("password colon", "password: " + pw),
        ("passphrase", "passphrase = " + pw),
        ("german", "Passwort: " + pw),
        ("token assigned", "token=" + f.url(40)),
        ("github_token assigned", "GITHUB_TOKEN=ghp_" + f.alnum(36)),
        ("private key pem", "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA" + f.b64(64)
         + "\n-----END RSA PRIVATE KEY-----"),
        ("private key openssh", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk" + f.b64(60)),
        ("pgp private key", "-----BEGIN PGP PRIVATE KEY BLOCK-----\n" + f.b64(64)),
        ("sendgrid", "SG." + f.url(22) + "." + f.url(43)),
        ("twilio", "SK" + f.hex(32)),
        ("npm", "npm_" + f.alnum(36)),
        ("pypi", "pypi-AgEIcHlwaS5vcmc" + f.url(60)),
        ("hugging face", "hf_" + f.alnum(34)),
        ("shopify", "shpat_" + f.hex(32)),
        ("digitalocean", "dop_v1_" + f.hex(64)),
        ("square", "sq0atp-" + f.url(22)),
        ("telegram", "bot" + f.chars(string.digits, 10) + ":AA" + f.url(33)),
        ("ctxadmin api key", "ctx_" + f.chars(string.ascii_lowercase + string.digits, 10) + "_"
         + f.url(43)),
        ("ctxadmin tool token", "ctt_" + f.chars(string.ascii_lowercase + string.digits, 10)
         + "_" + f.url(43)),
        ("fullwidth password", fullwidth("password=") + f.fullwidth("hunter22" + f.alnum(4))),
        ("fullwidth api key", fullwidth("api_key:") + f.alnum(24)),
        ("zero-width split", "pass\u200bword=" + pw),
        ("zero-width joiner key", "api\u200d_key=" + f.alnum(24)),
        ("soft hyphen", "pass\u00adword: " + pw),
        ("nbsp", "password:\u00a0" + pw),
        ("fullwidth sk", fullwidth("sk-") + f.fullwidth(f.alnum(24))),
        ("multiline json", 'config = {\n    "aws_secret_access_key": "' + f.aws_secret() + '",\n}'),
        ("markdown code", "```\nexport STRIPE_KEY=sk_live_" + f.alnum(24) + "\n```"),
        ("quoted in prose", 'he said the password was "' + pw + '"'),
        ("dsn", "SENTRY_DSN=https://" + f.hex(32) + "@o1.ingest.sentry.io/1"),
        ("client secret yaml", "client_secret: " + f.url(40)),
        # round three: short names, command lines, more providers, encodings, languages
        ("pass in a query", "GET /login?user=bob&pass=" + f.alnum(12)),
        ("pass json", '{"user": "bob", "pass": "' + f.alnum(12) + '"}'),
        ("pw assigned", "pw=" + f.alnum(10)),
        ("short password", "password: Zq9"),  # three characters (also "abc": the corpus test)
        ("curl -u", "curl -u admin:" + f.alnum(14) + " https://api.example.com/v1"),
        ("curl --user", "curl -s --user 'deploy:" + f.alnum(14) + "' https://ci.example.com"),
        ("mysql -p", "mysql -h db -u root -p" + f.alnum(12) + " app"),
        ("sshpass", "sshpass -p '" + f.alnum(12) + "' ssh deploy@10.0.0.7"),
        ("docker login", "docker login -u ci -p " + f.alnum(20) + " registry.example.com"),
        ("vault", "VAULT says hvs." + f.url(90)),
        ("databricks", "dapi" + f.hex(32)),
        ("notion", "secret_" + f.alnum(43)),
        ("mailgun", "key-" + f.hex(32)),
        ("linear", "lin_api_" + f.alnum(40)),
        ("doppler", "dp.st.prd." + f.alnum(43)),
        ("atlassian", "ATATT3xFfGF0" + f.url(170) + "=" + f.hex(8).upper()),
        ("grafana", "glsa_" + f.alnum(32) + "_" + f.hex(8)),
        ("age", "AGE-SECRET-KEY-1" + f.chars("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58)),
        ("slack refresh", "xoxe-1-" + f.alnum(40)),
        ("azure client secret", "client secret " + f.chars(string.ascii_letters, 3) + "8Q~"
         + f.chars(string.ascii_letters + string.digits + "_~.-", 34)),
        ("aws session token", "FwoGZXIvYXdzE" + f.b64(300)),
        ("aws session token iq", "IQoJb3JpZ2luX2VjE" + f.b64(300)),
        ("discord webhook", "https://discord.com/api/webhooks/" + f.chars(string.digits, 18)
         + "/" + f.url(68)),
        ("teams webhook", "https://acme.webhook.office.com/webhookb2/" + f.hex(8) + "-"
         + f.hex(4) + "@" + f.hex(8) + "/IncomingWebhook/" + f.hex(32) + "/" + f.hex(8)),
        ("signed gcs url", "https://storage.googleapis.com/b/o.pdf?X-Goog-Algorithm="
         "GOOG4-RSA-SHA256&X-Goog-Date=20261204T000000Z&X-Goog-Signature=" + f.hex(256)),
        ("presigned s3 url", "https://b.s3.amazonaws.com/k?X-Amz-Security-Token="
         + f.b64(40) + "&X-Amz-Expires=300"),
        ("double-encoded json", '"{\\"api_key\\": \\"' + f.alnum(32) + '\\"}"'),
        ("double-encoded password", '{"body": "{\\"password\\":\\"' + pw + '\\"}"}'),
        ("base64 json credential", "creds: " + base64.b64encode(
            ('{"type": "service_account", "client_secret": "' + f.alnum(32) + '"}').encode()
        ).decode()),
        ("base64url json credential", base64.urlsafe_b64encode(
            ('{\n  "api_key": "' + f.alnum(32) + '"\n}').encode()).decode().rstrip("=")),
        ("pem header split", "-----BEGIN RSA PRIVATE\nKEY-----\nMIIEpAIBAAKCAQEA" + f.b64(64)
         + "\n-----END RSA PRIVATE KEY-----"),
        ("pem body and end", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" + f.b64(32) + "\n" + f.b64(64)
         + "\n-----END PRIVATE KEY-----"),
        ("french", "mon mot de passe est " + f.chars(string.ascii_lowercase, 6) + "Soleil"),
        ("french assigned", "mot_de_passe=" + f.alnum(12)),
        ("german sentence", "mein Passwort ist " + f.chars(string.ascii_lowercase, 8)),
        ("german lautet", "Das Passwort lautet " + f.alnum(8) + "!7"),
        ("spanish", "mi contraseña es " + f.chars(string.ascii_lowercase, 8)),
        ("portuguese", "minha senha é " + f.alnum(10) + "#1"),
        ("dutch", "mijn wachtwoord is " + f.chars(string.ascii_lowercase, 9)),
        ("japanese", "パスワードは" + f.alnum(10) + "1です"),
        ("japanese fullwidth", "パスワード\uff1a" + f.fullwidth(f.alnum(10) + "1")),
        ("chinese simplified", "我的密码是" + f.alnum(10) + "2"),
        ("chinese traditional", "密碼是 " + f.alnum(10) + "3"),
        ("korean", "비밀번호는 " + f.alnum(10) + "4"),
    ]
    # fmt: on
    return [(label, text, f.secret_in(text, pw, basic)) for label, text in texts]


class _Recording:
    """A ``Fakes`` that remembers every random part it made, to name the one in a text."""

    def __init__(self, fakes: Fakes):
        self.fakes = fakes
        self.made: list[str] = []

    def __getattr__(self, name):
        make = getattr(self.fakes, name)

        def recorded(*args):
            value = make(*args)
            self.made.append(value)
            return value

        return recorded

    def secret_in(self, text: str, *known: str) -> str:
        """The longest random part (or known secret) that ``text`` holds."""
        found = [part for part in (*self.made, *known) if len(part) >= 4 and part in text]
        if found:
            return max(found, key=len)
        return text.split()[-1]


# fmt: off
ORDINARY_TEXTS = [
    "Alice prefers aisle seats on morning flights.",
    "The traveller asked whether the 9:40 flight to Lisbon can move to Thursday.",
    "max_tokens: 1024",
    "Set max_output_tokens = 2048 and temperature = 0.2.",
    "prompt_token_count: 512, candidates_token_count: 77, total_token_count: 589",
    "usage: {\"input_tokens\": 1200, \"output_tokens\": 300}",
    "token_count = 12",
    "The token limit is 128000 for this model.",
    "The tokenizer splits words into tokens.",
    "author: Jane Austen",
    "keyword: travel, keywords: flights",
    "The secretary: Ms. Price will call back.",
    "The passenger's passport number is on file.",
    "Your boarding pass is attached.",
    "I need a basic understanding of how compaction works.",
    "Basic economy does not include a checked bag.",
    "my password is incorrect, can you reset it?",
    "my password is too long for the form",
    "The password is required to sign in.",
    "Enter your password below.",
    "password: ***",
    "password: ********",
    "api_key: <your key>",
    "api_key=${OPENAI_API_KEY}",
    "api_key = {{ secrets.API_KEY }}",
    "\"api_key\": null",
    "password: [redacted]",
    "Set the API key in the settings page.",
    "Authorization: required",
    "Authorization header missing",
    "Use the Bearer scheme.",
    "the secret is patience",
    "The secret to good pasta is salt.",
    "sha1 da39a3ee5e6b4b0d3255bfef95601890afd80709",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b",
    "uuid 123e4567-e89b-12d3-a456-426614174000",
    "https://example.com:8080/path?q=1",
    "Visit https://docs.example.com/guide#section for details.",
    "email me at alice@example.com",
    "ssh git@github.com:org/repo.git",
    "The meeting is at 10:30; bring the report.",
    "Ratio 16:9, time 12:45:00",
    "function lookup(ref: str) -> dict",
    "{\"city\": \"Lisbon\", \"seats\": 2, \"aisle\": true}",
    "{\"token_type\": \"Bearer\", \"expires_in\": 3600}",
    "{\"event_id\": \"e-1\", \"author\": \"user\", \"session_id\": \"s1\"}",
    "The monkey found a key in the turkey.",
    "Kubernetes secretKeyRef names the secret to mount.",
    "Rotate the credentials every 90 days.",
    "The cookie banner appears on first visit.",
    "Chocolate chip cookies are in the oven.",
    "sk-learn is a nickname for scikit-learn.",
    "ghost_town is a folder name",
    "AKIA is the prefix AWS uses for access key ids.",
    "The JWT header starts with eyJ.",
    "pk_live keys are publishable.",
    "The ratio was 3:1 in favour.",
    "Call --help for options.",
    "<password> is a placeholder in the docs.",
    "The PIN was reset yesterday.",
    "my pin is not working",
    "A long base64 blob: " + "QUJD" * 30,
    "path/to/some/deeply/nested/directory/structure/file.txt",
    "The word passwordless means no password at all.",
    "thinking_budget: 1024, include_thoughts: true",
    "thought_signature was returned by Gemini",
    "Das Passwort ist falsch.",
    "La contraseña es incorrecta.",
    "日本語のテキストです。パスワードではありません。",
    fullwidth("Fullwidth") + " text is fine.",
    "zero\u200bwidth space inside ordinary words",
    # near the round-three formats: everyday words and sentences, in five languages
    "Could you pass the salt?",
    "Please pass the message along to the team.",
    "Did the test pass? It did: pass 41, fail 0.",
    "Bring your passport and boarding pass: both are checked at the gate.",
    "The compass points north.",
    "my password manager is great",  # the credential word names the manager
    "I use a password manager for everything.",
    "Forgot your password? Use the reset link.",
    "curl -s https://api.example.com/v1/status",
    "curl -u user https://api.example.com (it prompts for the password)",
    "mysql -h db -P 3306 -u app -p app_db",
    "docker run -u 1000:1000 image",
    "docker login registry.example.com",
    "The key-value store keeps sessions for a day.",
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
    "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----",
    "The office.com webhook docs explain connectors.",
    "The discord server has a webhooks channel.",
    "eyJ is how base64 of a JSON object begins; ewo is another opening.",
    "secret_santa_list.txt is on the shared drive.",
    "Signed URLs expire after 15 minutes.",
    "Le mot de passe est incorrect.",
    "Mon mot de passe est oublié.",
    "Mein Passwort ist abgelaufen.",
    "Ihr Passwort ist zu kurz.",
    "Mi contraseña es incorrecta.",
    "Tu contraseña es muy débil.",
    "La passe décisive était superbe.",
    "Ich muss den Pass verlängern.",
    "El pase de abordar está en el correo.",
    "パスワードを忘れた場合は、リセットしてください。",
    "パスワードは8文字以上にしてください。",
    "パスポートを持ってきてください。",
    "请输入您的密码。",
    "密码是必填项。",
    "密碼錯誤\uff0c請再試一次。",
    "我的护照在包里。",
]
# fmt: on
