package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// pki is the files the control plane needs: one CA signs the API server's serving certificate and the admin's
// client certificate; a separate key pair signs and verifies service-account tokens.
type pki struct{ dir string }

func (p pki) path(name string) string { return filepath.Join(p.dir, name) }

// ensure writes whatever is missing and keeps what exists, so a restarted component sees the same identities
// and tokens issued before the restart stay valid.
func (p pki) ensure() error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	if exists(p.path("ca.crt")) && exists(p.path("apiserver.crt")) && exists(p.path("admin.crt")) && exists(p.path("sa.key")) {
		return nil
	}
	caKey, err := newKey()
	if err != nil {
		return err
	}
	caTemplate := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "kuota-cluster-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, caKey.Public(), caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writeCert(p.path("ca.crt"), caDER); err != nil {
		return err
	}
	if err := writeKey(p.path("ca.key"), caKey); err != nil {
		return err
	}
	serving := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(serviceIP)},
	}
	if err := p.issue("apiserver", serving, ca, caKey); err != nil {
		return err
	}
	// system:masters bypasses RBAC: only the rig (components, test set-up) uses it; kuota itself runs with a
	// service account's token so that RBAC is enforced on it.
	admin := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kuota-cluster-admin", Organization: []string{"system:masters"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := p.issue("admin", admin, ca, caKey); err != nil {
		return err
	}
	saKey, err := newKey()
	if err != nil {
		return err
	}
	if err := writeKey(p.path("sa.key"), saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return err
	}
	return os.WriteFile(p.path("sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

func (p pki) issue(name string, template, ca *x509.Certificate, caKey crypto.Signer) error {
	key, err := newKey()
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca, key.Public(), caKey)
	if err != nil {
		return err
	}
	if err := writeCert(p.path(name+".crt"), der); err != nil {
		return err
	}
	return writeKey(p.path(name+".key"), key)
}

// writeKubeconfig writes an admin kubeconfig with everything embedded, so it can be copied anywhere.
func (p pki) writeKubeconfig(path, server string) error {
	ca, err := os.ReadFile(p.path("ca.crt"))
	if err != nil {
		return err
	}
	cert, err := os.ReadFile(p.path("admin.crt"))
	if err != nil {
		return err
	}
	key, err := os.ReadFile(p.path("admin.key"))
	if err != nil {
		return err
	}
	config := clientcmdapi.NewConfig()
	config.Clusters["kuota-cluster"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	config.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	config.Contexts["kuota-cluster"] = &clientcmdapi.Context{Cluster: "kuota-cluster", AuthInfo: "admin"}
	config.CurrentContext = "kuota-cluster"
	return clientcmd.WriteToFile(*config, path)
}

func newKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(fmt.Sprintf("reading randomness: %v", err))
	}
	return n
}

func writeCert(path string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}
