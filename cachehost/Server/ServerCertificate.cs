using System.Net.Security;
using System.Security.Cryptography.X509Certificates;

namespace Hpc.CacheHost.Server;

internal static class ServerCertificate
{
    /// <summary>
    /// Loads a PEM certificate and key into the form SslStream serves with. The PKCS#12 round trip gives the key a
    /// persisted form, which Windows' TLS stack needs (an ephemeral PEM key works only on Linux and macOS).
    /// </summary>
    public static ServerTls Load(string certificateFile, string keyFile)
    {
        using var pem = X509Certificate2.CreateFromPemFile(certificateFile, keyFile);
        var certificate = X509CertificateLoader.LoadPkcs12(pem.Export(X509ContentType.Pkcs12), password: null);
        // Intermediate certificates in the same file are sent along, so clients that trust only the root can build the chain.
        var chain = new X509Certificate2Collection();
        chain.ImportFromPemFile(certificateFile);
        var context = SslStreamCertificateContext.Create(certificate, chain.Count > 1 ? new X509Certificate2Collection(chain.Skip(1).ToArray()) : null, offline: true);
        return new ServerTls(new SslServerAuthenticationOptions
        {
            ServerCertificateContext = context,
            ClientCertificateRequired = false,
        });
    }
}
