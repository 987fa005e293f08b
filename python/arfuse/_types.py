"""Mirrors of the enums, constants and structs of include/arfuse/arfuse.h.

Values and layouts are checked against the header by tests/python/test_layout.py, which compiles a
small C program with the system compiler; keep this file and the header in step.
"""
import ctypes
import enum

CONFIG_MAGIC = 0xAF05C0F1
MAX_RANKS = 16
PLAN_REASON_BYTES = 256
UNIQUE_ID_BYTES = 128  # ARFUSE_UNIQUE_ID_BYTES


class Result(enum.IntEnum):
    """arfuseResult_t. The member name is the C name without the `arfuse` prefix."""

    Success = 0
    InvalidArgument = 1
    InvalidUsage = 2
    Unsupported = 3
    CudaError = 4
    NcclError = 5
    SystemError = 6
    InternalError = 7
    PeerTimeout = 8
    NoDevice = 9
    Mismatch = 10


class DataType(enum.IntEnum):
    """arfuseDataType_t."""

    Bfloat16 = 0
    Float16 = 1
    Float32 = 2

    @property
    def label(self) -> str:
        """The library's short name (arfuseDataTypeName): "bf16", "fp16", "fp32"."""
        return _DTYPE_LABELS[self]

    @property
    def itemsize(self) -> int:
        return 4 if self is DataType.Float32 else 2

    @property
    def bit(self) -> int:
        """ARFUSE_DTYPE_BIT(dtype), for arfuseConfig_t.dtypeMask."""
        return 1 << int(self)


_DTYPE_LABELS = {DataType.Bfloat16: "bf16", DataType.Float16: "fp16", DataType.Float32: "fp32"}
DTYPE_ALL = DataType.Bfloat16.bit | DataType.Float16.bit | DataType.Float32.bit

# Names accepted wherever a dtype is expected, besides DataType members and their integer values.
# str(torch.bfloat16) is "torch.bfloat16", so torch dtypes are accepted without importing torch.
_DTYPE_ALIASES = {
    "bf16": DataType.Bfloat16, "bfloat16": DataType.Bfloat16,
    "fp16": DataType.Float16, "float16": DataType.Float16, "half": DataType.Float16,
    "fp32": DataType.Float32, "float32": DataType.Float32, "float": DataType.Float32,
}


class Algo(enum.IntEnum):
    """arfuseAlgo_t: auto and every path of the library's registry (src/algos/registry.cc), by id.

    The members between the markers are the registry's, as pythonAlgoMembers() writes them
    (tests/cpu/registry_test.cc fails, printing the block, when they differ): a path's names are
    spelled once, in its registry entry."""

    # BEGIN members generated from the registry (algos/registry.h pythonAlgoMembers)
    Auto = 0
    OneShot = 1
    TwoShot = 2
    Nccl = 3
    Local = 4
    LowLatency = 5
    HostStaged = 6
    Hierarchical = 7
    # END members generated from the registry

    @property
    def label(self) -> str:
        """The library's name (arfuseAlgoName): "auto", "oneshot", ..."""
        return self.name.lower()

    @classmethod
    def from_label(cls, label: str) -> "Algo":
        for a in cls:
            if a.label == label:
                return a
        raise ValueError(f"unknown algorithm {label!r}; expected one of {[a.label for a in cls]}")


class Op(enum.IntEnum):
    """arfuseOp_t."""

    AllReduce = 0
    AllReduceAddRmsNorm = 1


_OP_ALIASES = {"all_reduce": Op.AllReduce, "allreduce": Op.AllReduce,
               "all_reduce_add_rmsnorm": Op.AllReduceAddRmsNorm, "fused": Op.AllReduceAddRmsNorm}


# arfuseQuant_t (functional form: "None" is one of its names) and arfuseScaleLayout_t.
Quant = enum.IntEnum("Quant", [("None", 0), ("Fp8Static", 1), ("Fp8PerToken", 2), ("Nvfp4", 3)])
Quant.__doc__ = "arfuseQuant_t: the quantised output of arfuseAllReduceEpilogue."
ScaleLayout = enum.IntEnum("ScaleLayout", [("Linear", 0), ("Swizzled128x4", 1)])
ScaleLayout.__doc__ = "arfuseScaleLayout_t: NVFP4 block-scale layouts."
EPILOGUE_MAGIC = 0xAF0E9100


class Epilogue(ctypes.Structure):
    """arfuseEpilogue_t. `Epilogue.initializer()` gives ARFUSE_EPILOGUE_INITIALIZER."""

    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint),
        ("residualIn", ctypes.c_void_p),
        ("residualOut", ctypes.c_void_p),
        ("normOut", ctypes.c_void_p),
        ("weightPlusOne", ctypes.c_int),
        ("quant", ctypes.c_int),
        ("quantOut", ctypes.c_void_p),
        ("scaleOut", ctypes.c_void_p),
        ("scaleIn", ctypes.c_void_p),
        ("scaleLayout", ctypes.c_int),
    ]

    @classmethod
    def initializer(cls) -> "Epilogue":
        return cls(ctypes.sizeof(cls), EPILOGUE_MAGIC, None, None, None, 0, 0, None, None, None, 0)


class Config(ctypes.Structure):
    """arfuseConfig_t. Construct with `Config.initializer(version)` to get ARFUSE_CONFIG_INITIALIZER."""

    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint),
        ("version", ctypes.c_uint),
        ("maxTokens", ctypes.c_int),
        ("maxHidden", ctypes.c_int),
        ("dtypeMask", ctypes.c_uint),
        ("algo", ctypes.c_int),
        ("timeoutMs", ctypes.c_int),
        ("maxBlocks", ctypes.c_int),
        ("deterministic", ctypes.c_int),
        ("reserved", ctypes.c_int),
    ]

    @classmethod
    def initializer(cls, version: int) -> "Config":
        """The same values as ARFUSE_CONFIG_INITIALIZER, with `version` as the version code."""
        return cls(ctypes.sizeof(cls), CONFIG_MAGIC, version, -1, -1, DTYPE_ALL, -1, -1, -1, -1, 0)

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name, _ in self._fields_}


class PlanStruct(ctypes.Structure):
    """arfusePlan_t."""

    _fields_ = [
        ("algo", ctypes.c_int),  # arfuseAlgo_t: a C enum is an int on every ABI arfuse targets
        ("blocks", ctypes.c_int),
        ("threads", ctypes.c_int),
        ("reason", ctypes.c_char * PLAN_REASON_BYTES),
    ]


class UniqueIdStruct(ctypes.Structure):
    """arfuseUniqueId: 128 opaque bytes, passed by value to arfuseCommInitRank. c_ubyte rather than
    c_char so that reading the field returns every byte (a c_char array stops at the first NUL)."""

    _fields_ = [("internal", ctypes.c_ubyte * UNIQUE_ID_BYTES)]


# arfuseAllGatherFn_t: int (*)(void* ctx, const void* mine, void* all, size_t bytes).
AllGatherFn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
