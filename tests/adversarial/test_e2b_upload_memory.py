"""Issue 12 item 3 on the E2B surface: ``POST /files`` streams to disk, never whole in memory.

The unmodified E2B SDK uploads 8 files of 40 MiB at once, as multipart bodies (the form a
``str``/``bytes`` write and every SDK before envd 0.5.7 use) and as octet-stream bodies (a
file object), into 8 sandboxes (each workspace has a 64 MiB quota here). The broker's
resident memory is sampled throughout: had a body been kept whole, 8 x 40 MiB would show.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from e2b_code_interpreter import Sandbox

from tests.adversarial.conftest import KEY, Attack, Broker, RssSampler, rss_mb

ADV_E2B = True
pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]
UPLOADS = 8
SIZE = 40 << 20
#: Above the baseline at the peak: the body pieces in flight, never the bodies.
PEAK_ALLOWANCE_MB = 120


@pytest.mark.parametrize("form", ["multipart", "octet-stream"])
def test_concurrent_e2b_uploads_cost_the_broker_pieces_not_bodies(
    adv: Broker, attack: Attack, tmp_path: Path, form: str
) -> None:
    source = tmp_path / "upload.bin"
    with source.open("wb") as fh:
        for _ in range(SIZE >> 20):
            fh.write(os.urandom(1 << 20))
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    sandboxes = [
        Sandbox.create(api_key=KEY, api_url=adv.e2b_url, sandbox_url=adv.e2b_url)
        for _ in range(UPLOADS)
    ]
    attack.sessions += [(KEY, s.sandbox_id) for s in sandboxes]
    baseline = rss_mb(adv.pid)

    def upload(sbx: Sandbox) -> str:
        with source.open("rb") as fh:
            # A binary file object: httpx streams it (in a multipart body or as it is).
            info = sbx.files.write("data/upload.bin", fh, use_octet_stream=form != "multipart")
        return info.path

    with RssSampler(adv.pid, 0.05) as rss, ThreadPoolExecutor(UPLOADS) as pool:
        paths = list(pool.map(upload, sandboxes))
    peak, samples = rss.peak, rss.samples
    print(
        f"\nbroker RSS during {UPLOADS} concurrent {form} uploads of {SIZE >> 20} MiB: "
        f"baseline {baseline:.0f} MB, peak {peak:.0f} MB ({len(samples)} samples)"
    )
    assert paths == ["/home/user/data/upload.bin"] * UPLOADS
    check = "import hashlib\nhashlib.sha256(open('data/upload.bin', 'rb').read()).hexdigest()"
    for sbx in sandboxes:
        assert sbx.run_code(check).text == digest
    assert peak - baseline < PEAK_ALLOWANCE_MB, (baseline, peak)
