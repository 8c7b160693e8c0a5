"""Tiering: policies and reviewed plans (policy.py, plan.py), stubs a moved unit leaves (stub.py)."""
