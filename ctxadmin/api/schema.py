"""OpenAPI additions: the bearer API key scheme and the error envelope on every operation."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension

from ctxadmin.api.paths import PATH_PARAMETER_RULES

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "additionalProperties": False,
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "details"],
            "additionalProperties": False,
            "properties": {
                "code": {"type": "string", "description": "Stable machine-readable code."},
                "message": {"type": "string"},
                "details": {"type": "object", "additionalProperties": True},
            },
        }
    },
}


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "ctxadmin.auth.ApiKeyAuthentication"
    name = "ApiKeyAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key of the app in the path: `Authorization: Bearer ctx_…`.",
        }


def add_error_envelope(result, generator, request, public):
    """Every operation may answer with the error envelope (any non-2xx status)."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    reference = {"$ref": "#/components/schemas/Error"}
    for path in result.get("paths", {}).values():
        for operation in path.values():
            for parameter in operation.get("parameters", []):
                rule = PATH_PARAMETER_RULES.get(parameter["name"])
                if parameter["in"] == "path" and rule:
                    pattern, description = rule
                    parameter["schema"]["pattern"] = pattern.removesuffix("\\Z") + "$"
                    parameter.setdefault("description", description)
            operation.setdefault("responses", {}).setdefault(
                "default",
                {"description": "An error", "content": {"application/json": {"schema": reference}}},
            )
    return result
