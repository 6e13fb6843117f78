"""The README's example is examples/readme.py, as printed (the live tests run it)."""

import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))


def test_the_readme_example_is_the_example_script():
    with open(os.path.join(HERE, "..", "README.md"), encoding="utf-8") as fh:
        blocks = re.findall(r"```python\n(.*?)```", fh.read(), re.S)
    with open(os.path.join(HERE, "..", "examples", "readme.py"), encoding="utf-8") as fh:
        script = fh.read()
    assert blocks and blocks[0] == script
    assert len([line for line in script.splitlines() if line.strip()]) <= 10
