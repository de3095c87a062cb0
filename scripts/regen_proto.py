"""Regenerate proto/et_def_pb2.py (and its type stub) from proto/et_def.proto, or check them.

Why a pinned generator: protoc stamps the Python code it generates, and code from protoc 27
or newer calls ``ValidateProtobufRuntimeVersion``, which refuses any protobuf runtime older
than that protoc. The project supports protobuf >= 5.26, so the checked-in module is generated
by protoc 26.1 (bundled in grpcio-tools 1.64.3): its output carries no runtime gate and runs on
protobuf 5.26 through 7.x (scripts/protobuf_matrix.sh shows it). grpcio-tools is a tool, not a
project dependency; install it in a scratch venv:

    python3 -m venv /tmp/venv-protoc
    /tmp/venv-protoc/bin/pip install grpcio-tools==1.64.3
    /tmp/venv-protoc/bin/python scripts/regen_proto.py           # rewrite et_def_pb2.py
    /tmp/venv-protoc/bin/python scripts/regen_proto.py --check   # exit 1 if it is stale

The same protoc writes ``et_def_pb2.pyi``, the stub through which mypy sees the message
classes (the generated module builds them at run time, so it has no types of its own).

Exit status: 0 written / up to date, 1 stale (--check), 2 wrong or missing grpcio-tools.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import sys
import tempfile
from pathlib import Path

PINNED_GRPCIO_TOOLS = "1.64.3"
PROTO_DIR = Path(__file__).resolve().parents[1] / "proto"
PROTO_FILE = PROTO_DIR / "et_def.proto"
GENERATED = PROTO_DIR / "et_def_pb2.py"
STUB = PROTO_DIR / "et_def_pb2.pyi"


def installed_grpcio_tools() -> str | None:
    """Return the installed grpcio-tools version, or None when it is absent."""
    try:
        return importlib.metadata.version("grpcio-tools")
    except importlib.metadata.PackageNotFoundError:
        return None


def generate(out_dir: Path) -> list[Path]:
    """Run the bundled protoc on et_def.proto into out_dir; return the module's and stub's paths.

    The include path is the proto directory itself, so the descriptor's file name is plain
    ``et_def.proto`` (as in Chakra) and the module imports no other generated module.
    """
    from grpc_tools import protoc  # imported late: only this script needs it

    status = protoc.main(
        [
            "protoc",
            f"--proto_path={PROTO_DIR}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            str(PROTO_FILE),
        ]
    )
    if status != 0:
        raise SystemExit(f"protoc failed on {PROTO_FILE} (exit {status}); see its message above")
    return [out_dir / GENERATED.name, out_dir / STUB.name]


def main(argv: list[str] | None = None) -> int:
    """Regenerate (default) or compare (--check) et_def_pb2.py; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write; exit 1 if the checked-in module differs from a fresh generation",
    )
    args = parser.parse_args(argv)

    version = installed_grpcio_tools()
    if version != PINNED_GRPCIO_TOOLS:
        found = f"grpcio-tools {version} is installed" if version else "grpcio-tools is missing"
        print(
            f"regen_proto: {found}, but {GENERATED.name} is generated with grpcio-tools "
            f"{PINNED_GRPCIO_TOOLS} (protoc 26.1; newer protoc output refuses older protobuf "
            f"runtimes); pip install grpcio-tools=={PINNED_GRPCIO_TOOLS} in a scratch venv",
            file=sys.stderr,
        )
        return 2

    with tempfile.TemporaryDirectory(prefix="tacos-regen-proto-") as tmp:
        pairs = list(zip(generate(Path(tmp)), (GENERATED, STUB), strict=True))
        if not args.check:
            for fresh, checked_in in pairs:
                shutil.copyfile(fresh, checked_in)
                print(f"regen_proto: wrote {checked_in}")
            return 0
        stale = [c for f, c in pairs if not c.exists() or c.read_bytes() != f.read_bytes()]
        if not stale:
            print(f"regen_proto: {GENERATED.name} and {STUB.name} are up to date")
            return 0
    print(
        f"regen_proto: {', '.join(map(str, stale))} differ from what {PROTO_FILE.name} generates; "
        f"run scripts/regen_proto.py and commit the result",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
