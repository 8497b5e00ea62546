"""OpenAPI additions: the bearer API key scheme, the pagination parameters of every paginated
endpoint and the error envelope on every operation."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.utils import OpenApiParameter

from ctxadmin.api.paths import PATH_PARAMETER_RULES
from ctxadmin.api.tags import tag_for

PAGINATION_PARAMETERS = [
    OpenApiParameter("cursor", str, description="the `next` or `previous` of an earlier page"),
    OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1},
        description="page size (default CTXADMIN_PAGE_SIZE, at most CTXADMIN_MAX_PAGE_SIZE)",
    ),
]

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


class AutoSchema(SpectacularAutoSchema):
    """drf-spectacular's, plus ``cursor`` and ``limit`` on every paginated ``GET`` (our views
    paginate by hand, so drf-spectacular does not see them as list views), and operations
    grouped by topic (``TAG_RULES``)."""

    def get_tags(self):
        return [tag_for(self.path)]

    def get_override_parameters(self):
        parameters = super().get_override_parameters()
        if self.method == "GET" and getattr(self.view, "pagination_class", None) is not None:
            parameters = [*PAGINATION_PARAMETERS, *parameters]
        return parameters


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


def ref(name: str) -> dict:
    """A JSON Schema reference to the component ``name``."""
    return {"$ref": f"#/components/schemas/{name}"}


#: Any JSON object.
OBJECT = {"type": "object", "additionalProperties": True}


def strict(properties: dict, required: list[str] | None = None, **extra) -> dict:
    """An object schema with exactly ``properties`` (unknown keys are refused, as the API
    refuses them)."""
    schema = {"type": "object", "additionalProperties": False, "properties": properties, **extra}
    if required:
        schema["required"] = required
    return schema


def exactly_one_of(first: str, second: str) -> dict:
    """Of an object's properties ``first`` and ``second``, exactly one is present: neither
    both nor none. Stated under ``not`` (not as a top-level ``oneOf``), so that client
    generators keep the object one type rather than a union of partial ones."""
    return {
        "not": {
            "anyOf": [
                {"required": [first, second]},
                {"not": {"anyOf": [{"required": [first]}, {"required": [second]}]}},
            ]
        }
    }


def page(item: str) -> dict:
    """A cursor page of ``item``s."""
    return strict(
        {
            "results": {"type": "array", "items": ref(item)},
            "next": {"type": "string", "nullable": True},
            "previous": {"type": "string", "nullable": True},
        },
        ["results", "next", "previous"],
    )


def operation_docs(docs: dict[str, dict]):
    """A postprocessing hook giving operations (by operationId) a one-line ``summary`` and
    realistic examples in place of values generated from the schema: ``docs`` maps an
    operationId to ``{"summary": str, "request": value, "<status>": value}``. An example for
    a body or a status the operation does not document fails the schema's generation."""

    def add_operation_docs(result, generator, request, public):
        for path in result.get("paths", {}).values():
            for operation in path.values():
                doc = docs.get(operation.get("operationId"))
                if doc is None:
                    continue
                operation["summary"] = doc["summary"]
                for key, value in doc.items():
                    if key == "summary":
                        continue
                    if key == "request":
                        media = operation["requestBody"]["content"]["application/json"]
                    else:
                        media = operation["responses"][key]["content"]["application/json"]
                    media["examples"] = {"example": {"value": value}}
        return result

    return add_operation_docs
