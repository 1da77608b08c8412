"""The host snapshot itself (tests/node/host.py): a change in any part of it is reported, so the node
tier's "host unchanged" checks can fail. No node needed."""

from __future__ import annotations

import dataclasses

import pytest

from tests.node.host import HostState


@pytest.fixture(scope="module")
def state() -> HostState:
    return HostState.take()


def test_the_snapshot_holds_the_kernel_settings_and_rules_it_names(state: HostState) -> None:
    assert state.sysctls["vm/overcommit_memory"] != "<absent>"
    assert state.sysctls["net/ipv4/ip_forward"] in ("0", "1")
    assert state.network["links"]
    assert "iptables-save" in state.rules


def test_an_unchanged_host_has_no_differences(state: HostState) -> None:
    assert state.differences(HostState.take()) == []


@pytest.mark.parametrize("change", ["sysctl", "rule", "link", "path", "mount"])
def test_each_kind_of_change_is_reported(state: HostState, change: str) -> None:
    if change == "sysctl":
        after = dataclasses.replace(state, sysctls={**state.sysctls, "net/ipv4/ip_forward": "changed"})
    elif change == "rule":
        after = dataclasses.replace(state, rules={**state.rules, "iptables-save": state.rules["iptables-save"]
                                                  + "\n-A INPUT -j KUBE-FIREWALL"})
    elif change == "link":
        after = dataclasses.replace(state, network={**state.network, "links": state.network["links"] + "\n9: cni0"})
    elif change == "path":
        after = dataclasses.replace(state, paths={**state.paths, "/var/lib/cni": not state.paths["/var/lib/cni"]})
    else:
        after = dataclasses.replace(state, nsfs_mounts=(*state.nsfs_mounts, "/run/netns/cni-1"))
    found = state.differences(after)
    assert len(found) == 1, found
