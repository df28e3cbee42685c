"""Every ``server`` field is classified for ``backend: external``: refused (a launch knob the
harness cannot set on a running server) or applying (with what it does there), never both, never
neither -- so a field added to `Server` must say which it is."""

from __future__ import annotations

from harness.scenario.checks import EXTERNAL_APPLIES_SERVER, EXTERNAL_REFUSED_SERVER
from harness.scenario.server_models import Server


def test_every_server_field_is_classified_once_for_backend_external():
    fields = set(Server.model_fields)
    refused, applies = set(EXTERNAL_REFUSED_SERVER), set(EXTERNAL_APPLIES_SERVER)
    assert not refused & applies, refused & applies
    assert sorted(fields - refused - applies) == [], "classify these server fields for backend: external"
    assert sorted((refused | applies) - fields) == [], "classified fields that Server no longer has"
