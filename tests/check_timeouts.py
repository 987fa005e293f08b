"""Fails, naming them, when some CTest test of the build has no TIMEOUT property.
Usage: check_timeouts.py CTEST BUILD_DIR

The list comes from ctest itself (--show-only=json-v1, gtest-discovered cases included). ctest
rewrites Testing/Temporary/LastTest.log of the folder it reads, which is the running ctest's own log,
so it reads a copy of the build's CTestTestfile.cmake tree instead (those files name the tests'
executables and gtest lists by absolute path)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ctest, build = sys.argv[1], os.path.abspath(sys.argv[2])
with tempfile.TemporaryDirectory(prefix="arfuse-timeouts-") as shadow:
    for folder, _dirs, files in os.walk(build):
        if "CTestTestfile.cmake" in files:
            dest = os.path.join(shadow, os.path.relpath(folder, build))
            os.makedirs(dest, exist_ok=True)
            shutil.copy(os.path.join(folder, "CTestTestfile.cmake"), dest)
    out = subprocess.run([ctest, "--test-dir", shadow, "--show-only=json-v1"], capture_output=True, text=True,
                         check=True)
tests = json.loads(out.stdout)["tests"]
missing = [t["name"] for t in tests if not any(p["name"] == "TIMEOUT" for p in t.get("properties", []))]
print(f"{len(tests)} tests, {len(tests) - len(missing)} with a TIMEOUT")
if missing:
    print("no TIMEOUT (add one where the test is declared, e.g. set_tests_properties(... TIMEOUT 60), or "
          "PROPERTIES TIMEOUT 120 in gtest_discover_tests):")
    for name in missing:
        print("  " + name)
    sys.exit(1)
