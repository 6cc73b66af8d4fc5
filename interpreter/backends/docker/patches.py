"""The engine's parts against the fixes of published container escapes (docs/security.md
H-02): kernels share the host's runc, containerd and kernel, so an old one is an escape
route whatever the container's own settings. Checked at start; an old part is logged at
CRITICAL (a distribution may have backported the fix without changing the version)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: The oldest version of each part with the fix, and the escape it fixes.
MINIMUMS: Mapping[str, tuple[tuple[int, ...], str]] = {
    "runc": ((1, 1, 12), "CVE-2024-21626, a host file descriptor leaked into the container"),
    "containerd": ((1, 4, 3), "CVE-2020-15257, the shim's API reachable from containers"),
}
#: The first patch release of each kernel series with the fix of Dirty Pipe.
KERNEL_FIXED: Mapping[tuple[int, int], int] = {(5, 10): 102, (5, 15): 25, (5, 16): 11}


def version_of(text: str) -> tuple[int, ...] | None:
    """The leading numbers of a version text (``1.1.5+ds1`` is (1, 1, 5))."""
    match = re.match(r"v?(\d+(?:\.\d+)*)", text.strip())
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def outdated(version: Mapping[str, Any]) -> list[str]:
    """What of the engine's ``version`` answer (``docker version``: its ``Components``
    and ``KernelVersion``) is older than its fix, one line each."""
    found = []
    for part in version.get("Components") or []:
        name, text = str(part.get("Name", "")), str(part.get("Version", ""))
        if name not in MINIMUMS:
            continue
        have, (least, cve) = version_of(text), MINIMUMS[name]
        if have is not None and have < least:
            wanted = ".".join(map(str, least))
            found.append(f"{name} {text} is older than {wanted}, which fixes {cve}")
    kernel = str(version.get("KernelVersion", ""))
    have = version_of(kernel)
    # Dirty Pipe came with 5.8; series that got its fix have it from their KERNEL_FIXED.
    if have is not None and len(have) >= 3 and (5, 8) <= have < (5, 16, 11):
        patch = KERNEL_FIXED.get((have[0], have[1]))
        if patch is None or have[2] < patch:
            found.append(f"the host kernel {kernel} may lack the fix of CVE-2022-0847 (Dirty Pipe)")
    return found
