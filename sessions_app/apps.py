from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    label = "sessions_app"
    verbose_name = "Sessions and events"

    def ready(self) -> None:
        from ctxadmin.delegated import register_delegated_credential, register_minter_ender
        from ctxadmin.erasure import register_user_eraser
        from sessions_app import erasure, tool_tokens

        register_delegated_credential(tool_tokens.TOKEN_PREFIX, tool_tokens.authenticate)
        register_user_eraser(erasure.erase_user_reach)
        register_minter_ender(tool_tokens.end_minted_by)
