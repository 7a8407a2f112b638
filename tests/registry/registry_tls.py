"""A throwaway CA and a certificate for 127.0.0.1, for the registry's TLS tests (the registry itself runs
through sluice.testing.RegistryProcess)."""

from __future__ import annotations

from pathlib import Path

import trustme


def tls_files(directory: Path) -> tuple[Path, Path, Path]:
    """A fresh CA and a certificate for 127.0.0.1 it signed, as PEM files: (cert, key, ca)."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_path, key_path, ca_path = directory / "cert.pem", directory / "key.pem", directory / "ca.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_path))
    cert.private_key_pem.write_to_path(str(key_path))
    ca.cert_pem.write_to_path(str(ca_path))
    return cert_path, key_path, ca_path
