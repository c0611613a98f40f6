//! The stack's certificates: one CA that signs every serving and client certificate, and that
//! the WECs' kube-controller-managers never see but the ITS's uses to sign OCM agents' CSRs.

use std::path::{Path, PathBuf};

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SanType,
};

/// Paths of the PEM files under `.stack/pki`.
#[derive(Clone, Debug)]
pub struct Pki {
    pub dir: PathBuf,
}

/// A client identity: common name (user) and organisations (groups).
pub struct ClientIdentity<'a> {
    pub file: &'a str,
    pub user: &'a str,
    pub groups: &'a [&'a str],
}

/// The client identities every stack has.
pub const ADMIN: ClientIdentity = ClientIdentity {
    file: "admin",
    user: "stack-admin",
    groups: &["system:masters"],
};
/// OCM agents register with this identity (the `clusteradm join` bootstrap group).
pub const BOOTSTRAP: ClientIdentity = ClientIdentity {
    file: "bootstrap",
    user: "system:bootstrap:stack",
    groups: &["system:bootstrappers:managedcluster"],
};

impl Pki {
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
    pub fn ca_key(&self) -> PathBuf {
        self.dir.join("ca.key")
    }
    pub fn serving_cert(&self) -> PathBuf {
        self.dir.join("serving.crt")
    }
    pub fn serving_key(&self) -> PathBuf {
        self.dir.join("serving.key")
    }
    pub fn service_account_key(&self) -> PathBuf {
        self.dir.join("service-account.key")
    }
    pub fn service_account_public_key(&self) -> PathBuf {
        self.dir.join("service-account.pub")
    }
    pub fn client_cert(&self, who: &ClientIdentity) -> PathBuf {
        self.dir.join(format!("{}.crt", who.file))
    }
    pub fn client_key(&self, who: &ClientIdentity) -> PathBuf {
        self.dir.join(format!("{}.key", who.file))
    }

    /// Creates the files unless they exist (so `make up` after `make down` keeps the same CA);
    /// a serving certificate naming other addresses than [`SERVING_NAMES`] is issued again.
    pub fn ensure(dir: &Path) -> anyhow::Result<Pki> {
        let pki = Pki { dir: dir.to_path_buf() };
        if pki.ca_cert().exists() {
            if std::fs::read_to_string(pki.serving_names()).ok().as_deref() != Some(&serving_names()) {
                let ca_key = KeyPair::from_pem(&std::fs::read_to_string(pki.ca_key())?)?;
                pki.issue_serving(&Issuer::new(ca_params(), ca_key))?;
            }
            return Ok(pki);
        }
        std::fs::create_dir_all(dir)?;
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca_params().self_signed(&ca_key)?;
        write(&pki.ca_cert(), &ca_cert.pem())?;
        write(&pki.ca_key(), &ca_key.serialize_pem())?;
        let issuer = Issuer::new(ca_params(), ca_key);
        pki.issue_serving(&issuer)?;

        for who in [&ADMIN, &BOOTSTRAP] {
            pki.issue_client(who, &issuer)?;
        }
        let service_account = KeyPair::generate()?;
        write(&pki.service_account_key(), &service_account.serialize_pem())?;
        write(&pki.service_account_public_key(), &service_account.public_key_pem())?;
        Ok(pki)
    }
}

impl Pki {
    /// The client certificate and key of `who`, issued by the CA now if there are none yet (an
    /// identity only some stacks need, such as a real node's).
    pub fn ensure_client(&self, who: &ClientIdentity) -> anyhow::Result<()> {
        if self.client_cert(who).exists() && self.client_key(who).exists() {
            return Ok(());
        }
        let ca_key = KeyPair::from_pem(&std::fs::read_to_string(self.ca_key())?)?;
        // The CA's subject and key are all a signature needs of it: the same parameters as the
        // CA certificate was made with.
        self.issue_client(who, &Issuer::new(ca_params(), ca_key))
    }

    /// The serving certificate every process of the stack serves with, for [`SERVING_NAMES`].
    fn issue_serving(&self, issuer: &Issuer<'_, KeyPair>) -> anyhow::Result<()> {
        let key = KeyPair::generate()?;
        let mut serving = CertificateParams::default();
        serving.distinguished_name.push(DnType::CommonName, "127.0.0.1");
        serving.subject_alt_names = vec![SanType::DnsName(SERVING_NAMES.0.try_into()?)];
        serving
            .subject_alt_names
            .extend(SERVING_NAMES.1.iter().map(|ip| SanType::IpAddress((*ip).into())));
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        write(&self.serving_cert(), &serving.signed_by(&key, issuer)?.pem())?;
        write(&self.serving_key(), &key.serialize_pem())?;
        write(&self.serving_names(), &serving_names())
    }

    fn serving_names(&self) -> PathBuf {
        self.dir.join("serving.names")
    }

    fn issue_client(&self, who: &ClientIdentity, issuer: &Issuer<'_, KeyPair>) -> anyhow::Result<()> {
        let key = KeyPair::generate()?;
        let mut client = CertificateParams::default();
        client.distinguished_name.push(DnType::CommonName, who.user);
        for group in who.groups {
            client.distinguished_name.push(DnType::OrganizationName, *group);
        }
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        write(&self.client_cert(who), &client.signed_by(&key, issuer)?.pem())?;
        write(&self.client_key(who), &key.serialize_pem())
    }
}

/// What the serving certificate names: `localhost`, loopback, the stack address real nodes'
/// Pods reach the apiservers at, and `kubernetes.default`'s address, which in-cluster clients ask
/// for.
const SERVING_NAMES: (&str, [std::net::Ipv4Addr; 3]) = (
    "localhost",
    [
        std::net::Ipv4Addr::LOCALHOST,
        super::node::STACK_ADDRESS,
        super::node::KUBERNETES_SERVICE_ADDRESS,
    ],
);

/// [`SERVING_NAMES`] as the file beside the certificate records them.
fn serving_names() -> String {
    format!("{:?}\n", SERVING_NAMES)
}

/// The CA certificate's parameters.
fn ca_params() -> CertificateParams {
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "kubestellar-stack-ca");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca
}

fn write(path: &Path, pem: &str) -> anyhow::Result<()> {
    std::fs::write(path, pem).with_context(|| format!("writing {}", path.display()))
}
