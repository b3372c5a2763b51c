"""The stand-in kubelet of the rendezvous test (tests/support/kubelet.py) expands and resolves as
Kubernetes documents it (the API reference of ``Container.command`` and ``EnvVar.value``): were it
more lenient, a manifest that fails on a cluster could pass there."""

from __future__ import annotations

import pytest

from tests.support.kubelet import container_env, expand, field, size_in_bytes


@pytest.mark.parametrize("text, expected", [
    ("$(A)", "1"),
    ("--node-rank=$(A)", "--node-rank=1"),
    ("$(MISSING)", "$(MISSING)"),  # "If a variable cannot be resolved, the reference ... will be unchanged"
    ("$$(A)", "$(A)"),  # "Double $$ are reduced to a single $": an escaped reference is never expanded
    ("$$$(A)", "$1"),
    ("$A $", "$A $"),  # a $ that begins no reference stays
    ("$(A", "$(A"),  # an unclosed reference stays
    ("$(A)$(B)", "12"),
])
def test_references_expand_as_kubernetes_expands_them(text, expected):
    assert expand(text, {"A": "1", "B": "2"}) == expected


def test_an_env_value_sees_only_the_variables_before_it():
    pod = {"metadata": {"name": "p", "annotations": {"a": "x"}}}
    container = {"env": [{"name": "EARLY", "value": "$(LATE)"}, {"name": "LATE", "value": "7"},
                         {"name": "AFTER", "value": "$(LATE)"},
                         {"name": "ANN", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['a']"}}},
                         {"name": "NONE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['b']"}}},
                         {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}
    assert container_env(pod, container, "10.0.0.5") == {"EARLY": "$(LATE)", "LATE": "7", "AFTER": "7", "ANN": "x",
                                                        "NONE": "", "IP": "10.0.0.5"}


def test_what_the_stand_in_cannot_read_is_an_error_not_a_guess():
    with pytest.raises(AssertionError):
        field({"metadata": {"name": "p"}}, "spec.nodeName", "10.0.0.5")
    with pytest.raises(AssertionError):
        container_env({"metadata": {"name": "p"}}, {"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {}}}]}, "ip")
    assert size_in_bytes("16Gi") == 16 * 2 ** 30
