"""Imported by the forkserver for S3 runs: loads botocore and the S3 service model once, before forking."""

from storekit.bench.engine_s3 import warm_up

warm_up()
