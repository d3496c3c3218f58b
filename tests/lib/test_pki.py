# test_pki.py - a small PKI made at test time for the certificate interop
# tests (tests/netns/test_ike_strongswan_certs.py): a root CA, an
# intermediate CA, end-entity certificates with a DNS subjectAltName, and
# CRLs, through python3-cryptography. Nothing here is kept in git: keys are
# fresh on every run and written with mode 0600.
"""Test-time CA, intermediate, end-entity certificates and CRLs."""

import datetime
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID

DAY = datetime.timedelta(days=1)


def new_key(kind):
    """new_key() - "rsa" (2048), "p256", "p384" or "ed25519"."""
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if kind == "p256":
        return ec.generate_private_key(ec.SECP256R1())
    if kind == "p384":
        return ec.generate_private_key(ec.SECP384R1())
    if kind == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    raise ValueError(kind)


def _hash_for(key):
    return None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "esptun interop"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


class Cert:
    """A certificate with its key; a CA among them issues the others."""

    def __init__(self, cn, key, issuer=None, ca=False, dns=(), serial=None, days=(-1, 10),
                 emails=()):
        self.key, self.cn = key, cn
        now = datetime.datetime.now(datetime.timezone.utc)
        b = (x509.CertificateBuilder()
             .subject_name(_name(cn))
             .issuer_name(issuer.cert.subject if issuer else _name(cn))
             .public_key(key.public_key())
             .serial_number(serial or x509.random_serial_number())
             .not_valid_before(now + days[0] * DAY)
             .not_valid_after(now + days[1] * DAY)
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
             .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                            critical=False))
        if ca:
            b = b.add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                              False), critical=True)
        else:
            b = b.add_extension(x509.KeyUsage(True, False, False, False, False, False, False,
                                              False, False), critical=True)
        if dns or emails:
            b = b.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName(d) for d in dns] + [x509.RFC822Name(e) for e in emails]),
                critical=False)
        signer = issuer.key if issuer else key
        self.cert = b.sign(signer, _hash_for(signer))

    def pem(self):
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def key_pem(self):
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()).decode()

    def key_pem_traditional(self):
        """key_pem_traditional() - the key as "RSA/EC PRIVATE KEY" PEM, as
        swanctl's rsa/ and ecdsa/ folders take it."""
        return self.key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.TraditionalOpenSSL,
                                      serialization.NoEncryption()).decode()

    def crl_pem(self, revoked=()):
        """crl_pem() - this CA's CRL listing the certificates @revoked."""
        now = datetime.datetime.now(datetime.timezone.utc)
        b = (x509.CertificateRevocationListBuilder().issuer_name(self.cert.subject)
             .last_update(now - DAY).next_update(now + DAY))
        for c in revoked:
            b = b.add_revoked_certificate(
                x509.RevokedCertificateBuilder().serial_number(c.cert.serial_number)
                .revocation_date(now - datetime.timedelta(minutes=1)).build())
        return b.sign(self.key, _hash_for(self.key)).public_bytes(
            serialization.Encoding.PEM).decode()


class Pki:
    """Root -> intermediate, and end entities under the intermediate."""

    def __init__(self, name="Interop Root", ca_kind="p256"):
        self.root = Cert(name, new_key(ca_kind), ca=True)
        self.inter = Cert(name + " Intermediate", new_key(ca_kind), issuer=self.root, ca=True)

    def issue(self, host, kind):
        return Cert(host, new_key(kind), issuer=self.inter, dns=(host,))

    def issue_user(self, email, kind):
        """issue_user() - a user's certificate: CN and an RFC 822 subjectAltName @email."""
        return Cert(email, new_key(kind), issuer=self.inter, emails=(email,))


def write(path, text, mode=0o644):
    """write() - @text to @path, created with @mode (0600 for keys: never readable by others)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    os.fchmod(fd, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path
