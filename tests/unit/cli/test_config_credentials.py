"""`storekit config check` against the real Ceph RGW with a wrong secret: the gateway's bare 403 (a
HEAD answer has no body) is said in words, naming the tier and bucket; the secret is never printed
(#34 item 9)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from storekit.config import TierConfig
from storekit.store import open_store
from tests.conftest import remove_bucket, run_in_process, s3_options

WRONG = "wrong-secret-b71e"


@pytest.mark.ceph
def test_check_with_a_wrong_secret_says_the_gateway_refused_the_credentials(tmp_path: Path) -> None:
    options = s3_options()
    bucket = f"sk-cred-{uuid.uuid4().hex[:10]}"
    store = open_store(TierConfig(name="archive", url=f"s3://{bucket}/storage", options=options))
    store.makedirs("")
    try:
        (tmp_path / "storekit.toml").write_text(
            f'[tiers.archive]\nurl = "s3://{bucket}/storage"\nrole = "archive"\n'
            f'[tiers.archive.options]\nendpoint_url = "{options["endpoint_url"]}"\n'
            f'key = "{options["key"]}"\nsecret = "{WRONG}"\n'
        )
        ran = run_in_process(["config", "check", "--json"], cwd=tmp_path)
        assert ran.code == 1 and "Traceback" not in ran.stderr, ran.stderr
        (tier,) = json.loads(ran.stdout)["tiers"]
        assert tier["reachable"] is False
        assert tier["error"].startswith(f"tier archive: {options['endpoint_url']} refused access to bucket")
        assert "(HTTP 403" in tier["error"] and "a wrong key or secret" in tier["error"]
        text = run_in_process(["config", "check"], cwd=tmp_path)
        assert text.code == 1 and "a wrong key or secret" in text.stdout + text.stderr
        assert "hint:" in text.stderr and "AWS_SECRET_ACCESS_KEY" in text.stderr
        assert WRONG not in ran.stdout + ran.stderr + text.stdout + text.stderr
    finally:
        remove_bucket(store, bucket)
