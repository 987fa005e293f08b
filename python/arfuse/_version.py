# Must match ARFUSE_VERSION_MAJOR/MINOR/PATCH of include/arfuse/arfuse.h (a test checks it).
__version__ = "0.1.0"
# ARFUSE_VERSION_CODE of the header this package mirrors (major * 10000 + minor * 100 + patch).
ABI_VERSION_CODE = 100
