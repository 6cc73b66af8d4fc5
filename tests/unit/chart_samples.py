"""Chart descriptions shared by tests: what the kernel gives (``test_kernel_charts``) is
what the E2B translation is fed (``test_e2b_charts``)."""

from __future__ import annotations

from typing import Any

#: The kernel's description of one box: group "a" of ``test_kernel_charts.FRAME``
#: (values 1, 2, 3, 4, 10) drawn by seaborn's ``boxplot``.
BOX_GROUP_A: dict[str, Any] = {
    "median": 3,
    "q1": 2,
    "q3": 4,
    "whisker_low": 1,
    "whisker_high": 4,
    "mean": 4,
    "outliers": 1,
    "outlier_values": [10],
    "label": "a",
}
