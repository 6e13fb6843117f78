"""The language-neutral decode vectors (tests/conformance/decode-vectors.json) checked against
this SDK's pure decoder: used by the conformance runner's ``decode_vectors`` case and by the
unit tests."""

from __future__ import annotations

import json
from typing import List

from ..decode import DecodeError, LayoutSpec, decode, session_hash_of


def check_vectors(path: str) -> tuple[int, List[str]]:
    """Checks every vector of the file: (how many were checked, the failures, each a line)."""
    with open(path, encoding="utf-8") as fh:
        v = json.load(fh)
    failures: List[str] = []
    checked = 0
    now = v["now_ms"]
    layouts = v["layouts"]
    for case in v["decode"]:
        name, text = case["layout"], case["input"]
        entry = layouts[name]
        at = entry.get("load_at_ms", now)
        try:
            layout = LayoutSpec.from_mapping(entry["spec"]).load(at)
        except DecodeError as e:
            failures.append(f"layout {name} does not load at {at}: {e}")
            continue
        checked += 1
        try:
            got = decode(layout, text).view()
        except DecodeError as e:
            if "error" in case:
                if str(e) != case["error"]:
                    failures.append(f"{name} {text!r}: error {str(e)!r}, want {case['error']!r}")
            else:
                failures.append(f"{name} {text!r}: {e}")
            continue
        if "error" in case:
            failures.append(f"{name} {text!r}: decoded, want error {case['error']!r}")
            continue
        expect = case.get("expect") or {}
        if not expect:
            failures.append(f"{name} {text!r}: a vector without expectations")
        for key, want in expect.items():
            if key not in got:
                failures.append(f"{name} {text!r}: unknown field {key}")
            elif got[key] != want or type(got[key]) is not type(want):
                failures.append(f"{name} {text!r}: {key} is {got[key]!r}, want {want!r}")
    for case in v.get("layout_errors", []):
        checked += 1
        try:
            LayoutSpec.from_mapping(case["spec"]).load(case["load_at_ms"])
            failures.append(f"{case['spec']}: loads, want an error with {case['error_contains']!r}")
        except DecodeError as e:
            if case["error_contains"] not in str(e):
                failures.append(f"{case['spec']}: error {str(e)!r}, want one with {case['error_contains']!r}")
    for case in v.get("session_hashes", []):
        checked += 1
        got = session_hash_of(case["session_id"])
        if got != case["hash"]:
            failures.append(f"session hash of {case['session_id']!r}: {got}, want {case['hash']}")
    return checked, failures
