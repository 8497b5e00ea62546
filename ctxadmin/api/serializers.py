from __future__ import annotations

from collections.abc import Mapping

from rest_framework import serializers

from ctxadmin.pruning import MAX_ECHOED, echoed


class StrictSerializer(serializers.Serializer):
    """An input serializer that rejects keys it does not declare (at every nesting level
    where nested serializers are StrictSerializers too)."""

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {echoed(key): ["Unknown field."] for key in unknown[:MAX_ECHOED]}
                )
        return super().to_internal_value(data)


class StrictCharField(serializers.CharField):
    """A JSON string only: DRF's CharField also takes a number and keeps its text."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)
