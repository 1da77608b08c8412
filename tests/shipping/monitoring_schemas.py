"""Schemas for the two Prometheus Operator kinds the monitoring component ships (monitoring.coreos.com/v1),
written here from the operator's API reference (https://prometheus-operator.dev/docs/api-reference/api/)
for the fields this project may use: the shipping tests validate them strictly, so a misspelt or
misplaced field fails as `kubectl apply --validate=strict` would against the installed CRDs. Fields not
listed here are refused; add them from the reference when a manifest needs them."""

from __future__ import annotations

from typing import Any

_STRING: dict[str, Any] = {"type": "string"}
_STRINGS: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}
_DURATION: dict[str, Any] = {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?"
                                                          r"(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
_LABEL_SELECTOR: dict[str, Any] = {"type": "object", "properties": {
    "matchLabels": _STRINGS,
    "matchExpressions": {"type": "array", "items": {"type": "object", "required": ["key", "operator"], "properties": {
        "key": _STRING, "operator": _STRING, "values": {"type": "array", "items": _STRING}}}}}}

RULE: dict[str, Any] = {"type": "object", "required": ["expr"], "properties": {
    "alert": _STRING, "record": _STRING, "expr": {"x-kubernetes-int-or-string": True},
    "for": _DURATION, "keep_firing_for": _DURATION, "labels": _STRINGS, "annotations": _STRINGS}}

PROMETHEUS_RULE: dict[str, Any] = {"type": "object", "required": ["spec"], "properties": {"spec": {
    "type": "object", "properties": {"groups": {"type": "array", "items": {
        "type": "object", "required": ["name"], "properties": {
            "name": {"type": "string", "minLength": 1}, "interval": _DURATION, "query_offset": _DURATION,
            "limit": {"type": "integer"}, "labels": _STRINGS, "partial_response_strategy": _STRING,
            "rules": {"type": "array", "items": RULE}}}}}}}}

ENDPOINT: dict[str, Any] = {"type": "object", "properties": {
    "port": _STRING, "targetPort": {"x-kubernetes-int-or-string": True}, "path": _STRING,
    "scheme": {"type": "string", "enum": ["http", "https", "HTTP", "HTTPS"]}, "interval": _DURATION,
    "scrapeTimeout": _DURATION, "honorLabels": {"type": "boolean"}, "honorTimestamps": {"type": "boolean"},
    "params": {"type": "object"}, "relabelings": {"type": "array"}, "metricRelabelings": {"type": "array"}}}

SERVICE_MONITOR: dict[str, Any] = {"type": "object", "required": ["spec"], "properties": {"spec": {
    "type": "object", "required": ["selector"], "properties": {
        "selector": _LABEL_SELECTOR, "jobLabel": _STRING,
        "namespaceSelector": {"type": "object", "properties": {"any": {"type": "boolean"},
                                                               "matchNames": {"type": "array", "items": _STRING}}},
        "endpoints": {"type": "array", "items": ENDPOINT},
        "targetLabels": {"type": "array", "items": _STRING}, "podTargetLabels": {"type": "array", "items": _STRING},
        "sampleLimit": {"type": "integer"}}}}}

SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("monitoring.coreos.com/v1", "PrometheusRule"): PROMETHEUS_RULE,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR,
}
