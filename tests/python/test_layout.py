"""The ctypes mirrors against the C header, compiled at test time with the system C compiler:
struct sizes and field offsets, ARFUSE_CONFIG_INITIALIZER, constants and every enumerator."""
import ctypes
import re
import subprocess

import pytest

import arfuse
from arfuse._types import PLAN_REASON_BYTES, PlanStruct
from conftest import HEADER, find_cc


def _enumerators():
    """(name, python enum, python member name) for every enumerator of the header's public enums."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    out = []
    for body, tname in re.findall(r"typedef enum\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        for name in re.findall(r"\b(arfuse\w+)\s*=", body):
            out.append((tname, name))
    return out


@pytest.fixture(scope="module")
def c_facts(tmp_path_factory):
    cc = find_cc()
    if cc is None:
        pytest.skip("no C compiler (cc/gcc/clang) on this machine: cannot compile the layout probe")
    d = tmp_path_factory.mktemp("layout")
    cfg_fields = [name for name, _ in arfuse.Config._fields_]
    plan_fields = [name for name, _ in PlanStruct._fields_]
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "arfuse/arfuse.h"', "int main(void) {",
             "  arfuseConfig_t init = ARFUSE_CONFIG_INITIALIZER;",
             '  printf("sizeof Config %zu\\n", sizeof(arfuseConfig_t));',
             '  printf("sizeof Plan %zu\\n", sizeof(arfusePlan_t));',
             '  printf("sizeof reason %zu\\n", sizeof(((arfusePlan_t*)0)->reason));']
    for f in cfg_fields:
        lines.append(f'  printf("offset Config.{f} %zu\\n", offsetof(arfuseConfig_t, {f}));')
        lines.append(f'  printf("init {f} %lld\\n", (long long)init.{f});')
    for f in plan_fields:
        lines.append(f'  printf("offset Plan.{f} %zu\\n", offsetof(arfusePlan_t, {f}));')
    lines.append('  printf("sizeof Epilogue %zu\\n", sizeof(arfuseEpilogue_t));')
    lines.append('  printf("const ARFUSE_EPILOGUE_MAGIC %lld\\n", (long long)ARFUSE_EPILOGUE_MAGIC);')
    for f, _ in arfuse.Epilogue._fields_:
        lines.append(f'  printf("offset Epilogue.{f} %zu\\n", offsetof(arfuseEpilogue_t, {f}));')
    for macro in ("ARFUSE_CONFIG_MAGIC", "ARFUSE_VERSION_CODE", "ARFUSE_MAX_RANKS", "ARFUSE_DTYPE_ALL"):
        lines.append(f'  printf("const {macro} %lld\\n", (long long)({macro}));')
    for _, name in _enumerators():
        lines.append(f'  printf("enum {name} %d\\n", (int)({name}));')
    lines.append('  printf("sizeof enum %zu\\n", sizeof(arfuseAlgo_t));')
    lines += ["  return 0;", "}"]
    src = d / "probe.c"
    src.write_text("\n".join(lines) + "\n")
    exe = d / "probe"
    r = subprocess.run([cc, "-std=c99", "-Wall", "-Werror", f"-I{HEADER.parent.parent}", "-o", str(exe), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    facts = {}
    for line in out.splitlines():
        kind, key, value = line.split(" ")
        facts[(kind, key)] = int(value)
    return facts


def test_struct_sizes(c_facts):
    assert ctypes.sizeof(arfuse.Config) == c_facts[("sizeof", "Config")]
    assert ctypes.sizeof(PlanStruct) == c_facts[("sizeof", "Plan")]
    assert PLAN_REASON_BYTES == c_facts[("sizeof", "reason")]
    assert ctypes.sizeof(ctypes.c_int) == c_facts[("sizeof", "enum")]  # enums are passed as c_int


def test_field_offsets(c_facts):
    for name, _ in arfuse.Config._fields_:
        assert getattr(arfuse.Config, name).offset == c_facts[("offset", f"Config.{name}")], name
    for name, _ in PlanStruct._fields_:
        assert getattr(PlanStruct, name).offset == c_facts[("offset", f"Plan.{name}")], name


def test_epilogue_layout(c_facts):
    assert ctypes.sizeof(arfuse.Epilogue) == c_facts[("sizeof", "Epilogue")]
    assert arfuse.EPILOGUE_MAGIC == c_facts[("const", "ARFUSE_EPILOGUE_MAGIC")]
    for name, _ in arfuse.Epilogue._fields_:
        assert getattr(arfuse.Epilogue, name).offset == c_facts[("offset", f"Epilogue.{name}")], name
    e = arfuse.Epilogue.initializer()
    assert (e.size, e.magic, e.quant, e.scaleLayout) == (ctypes.sizeof(arfuse.Epilogue), arfuse.EPILOGUE_MAGIC, 0, 0)


def test_initializer_matches_the_macro(c_facts, lib):
    cfg = arfuse.Config.initializer(lib.version_code)
    for name, _ in arfuse.Config._fields_:
        want = c_facts[("init", name)]
        if name == "algo":
            assert want == -1
        assert getattr(cfg, name) == want, name
    assert cfg.size == ctypes.sizeof(arfuse.Config)
    assert cfg.magic == 0xAF05C0F1
    assert (cfg.maxTokens, cfg.maxHidden, cfg.dtypeMask, cfg.algo, cfg.timeoutMs, cfg.maxBlocks) == \
        (-1, -1, 0x7, -1, -1, -1)


def test_initializer_matches_arfuseConfigInit(lib):
    filled = arfuse.Config()
    assert lib.arfuseConfigInit(ctypes.byref(filled)) == 0
    assert filled.as_dict() == arfuse.Config.initializer(lib.version_code).as_dict()
    assert arfuse.make_config().as_dict() == filled.as_dict()


def test_constants(c_facts):
    assert arfuse.CONFIG_MAGIC == c_facts[("const", "ARFUSE_CONFIG_MAGIC")]
    assert arfuse.ABI_VERSION_CODE == c_facts[("const", "ARFUSE_VERSION_CODE")]
    assert arfuse.MAX_RANKS == c_facts[("const", "ARFUSE_MAX_RANKS")]
    assert arfuse.DTYPE_ALL == c_facts[("const", "ARFUSE_DTYPE_ALL")]


def test_every_enumerator_is_mirrored(c_facts):
    enums = {"arfuseResult_t": (arfuse.Result, "arfuse", "arfuseNumResults"),
             "arfuseDataType_t": (arfuse.DataType, "arfuse", "arfuseNumDataTypes"),
             "arfuseAlgo_t": (arfuse.Algo, "arfuseAlgo", "arfuseNumAlgos"),
             "arfuseOp_t": (arfuse.Op, "arfuseOp", None),
             "arfuseQuant_t": (arfuse.Quant, "arfuseQuant", "arfuseNumQuants"),
             "arfuseScaleLayout_t": (arfuse.ScaleLayout, "arfuseScale", None)}
    seen = {t: set() for t in enums}
    for tname, cname in _enumerators():
        py, prefix, count = enums[tname]
        value = c_facts[("enum", cname)]
        if cname == count:
            assert value == len(py), cname
            continue
        member = py[cname[len(prefix):]]
        assert member.value == value, cname
        seen[tname].add(member)
    for tname, (py, _, _) in enums.items():
        assert seen[tname] == set(py), tname  # no Python member without a C enumerator
