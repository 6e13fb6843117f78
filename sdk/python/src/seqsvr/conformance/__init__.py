"""The SDK conformance runner (``python -m seqsvr.conformance``) and the decode vectors'
checker; see :mod:`seqsvr.conformance.runner` and tests/conformance/README.md."""
