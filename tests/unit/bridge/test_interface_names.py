"""NPWG 4.1.2.1.5 "a valid Linux kernel interface name" is the kernel's byte rule, in bridge.npwg and the agent.

The kernel's dev_valid_name() checks bytes: not empty, under IFNAMSIZ (16) with the
NUL, not "." or "..", no '/', ':' or isspace() byte, where the kernel's ctype counts
0xA0 (a UTF-8 continuation byte, e.g. in "à") as a space, while a Unicode space such
as U+2003 is three non-space bytes. Checked against `ip link add` in a netns.
"""

from __future__ import annotations

import pytest

from bridge import npwg
from bridge.agent.delegates import invoke

KERNEL_REFUSES = ["dà", "a b", "a\tb", "a/b", "a:b", "", ".", "..", "x" * 16, "é" * 8]
KERNEL_ACCEPTS = ["d\u2003x", "dé", "net1", "x" * 15, "é" * 7 + "x", "a.b", "a@b"]


@pytest.mark.parametrize("name", KERNEL_REFUSES)
def test_4_1_2_1_5_an_interface_name_the_kernel_refuses_is_invalid(name: str) -> None:
    assert npwg.interface_problem(name) is not None
    with pytest.raises(invoke.CNIError):
        invoke.check_ifname(name)


@pytest.mark.parametrize("name", KERNEL_ACCEPTS)
def test_4_1_2_1_5_an_interface_name_the_kernel_accepts_is_valid(name: str) -> None:
    assert npwg.interface_problem(name) is None
    assert invoke.check_ifname(name) == name
