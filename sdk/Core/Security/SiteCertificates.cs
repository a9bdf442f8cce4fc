using System.Net;
using System.Security.Cryptography;
using System.Security.Cryptography.X509Certificates;

namespace Hpc.CommonData.Security;

/// <summary>
/// A site's own certificate authority and a cache-host certificate it signs, as PEM files: what <c>hpcdata tls-init</c>
/// writes for a cluster without a PKI of its own. Hosts get <c>host.pem</c> and <c>host.key</c>; clients get <c>ca.pem</c>.
/// </summary>
public sealed record SiteCertificates(string CaFile, string CaKeyFile, string CertificateFile, string KeyFile)
{
    /// <summary>
    /// Creates the CA (or reuses the one already in <paramref name="directory"/>) and a host certificate valid for
    /// <paramref name="hostNames"/> (DNS names or IP addresses) for <paramref name="validity"/>.
    /// </summary>
    public static SiteCertificates Create(string directory, IReadOnlyCollection<string> hostNames, TimeSpan validity)
    {
        if (hostNames.Count == 0) throw new ArgumentException("name at least one host (a DNS name or an IP address)");
        Directory.CreateDirectory(directory);
        var files = new SiteCertificates(Path.Combine(directory, "ca.pem"), Path.Combine(directory, "ca.key"),
            Path.Combine(directory, "host.pem"), Path.Combine(directory, "host.key"));
        var now = DateTimeOffset.UtcNow;
        using var ca = File.Exists(files.CaFile) && File.Exists(files.CaKeyFile)
            ? X509Certificate2.CreateFromPemFile(files.CaFile, files.CaKeyFile)
            : NewAuthority(files, now, validity);

        using var hostKey = ECDsa.Create(ECCurve.NamedCurves.nistP256);
        var request = new CertificateRequest($"CN={hostNames.First()}", hostKey, HashAlgorithmName.SHA256);
        var names = new SubjectAlternativeNameBuilder();
        foreach (var name in hostNames)
        {
            if (IPAddress.TryParse(name, out var ip)) names.AddIpAddress(ip);
            else names.AddDnsName(name);
        }
        request.CertificateExtensions.Add(names.Build());
        request.CertificateExtensions.Add(new X509BasicConstraintsExtension(false, false, 0, true));
        request.CertificateExtensions.Add(new X509KeyUsageExtension(X509KeyUsageFlags.DigitalSignature, true));
        request.CertificateExtensions.Add(new X509EnhancedKeyUsageExtension([new Oid("1.3.6.1.5.5.7.3.1", "Server Authentication")], false));
        var notAfter = now + validity < ca.NotAfter ? now + validity : new DateTimeOffset(ca.NotAfter);
        using var host = request.Create(ca, now.AddMinutes(-5), notAfter, RandomNumberGenerator.GetBytes(16));
        WritePrivate(files.KeyFile, hostKey.ExportPkcs8PrivateKeyPem());
        File.WriteAllText(files.CertificateFile, host.ExportCertificatePem());
        return files;
    }

    private static X509Certificate2 NewAuthority(SiteCertificates files, DateTimeOffset now, TimeSpan validity)
    {
        using var key = ECDsa.Create(ECCurve.NamedCurves.nistP256);
        var request = new CertificateRequest("CN=hpcdata cache tier CA", key, HashAlgorithmName.SHA256);
        request.CertificateExtensions.Add(new X509BasicConstraintsExtension(true, true, 0, true));
        request.CertificateExtensions.Add(new X509KeyUsageExtension(X509KeyUsageFlags.KeyCertSign | X509KeyUsageFlags.CrlSign, true));
        request.CertificateExtensions.Add(new X509SubjectKeyIdentifierExtension(request.PublicKey, false));
        // The authority outlives the host certificates it signs, so hosts can be re-issued without touching clients.
        var ca = request.CreateSelfSigned(now.AddMinutes(-5), now + validity * 4);
        WritePrivate(files.CaKeyFile, key.ExportPkcs8PrivateKeyPem());
        File.WriteAllText(files.CaFile, ca.ExportCertificatePem());
        return ca;
    }

    /// <summary>Private keys are readable by their owner only from the moment they exist.</summary>
    private static void WritePrivate(string path, string pem)
    {
        var options = new FileStreamOptions { Mode = FileMode.Create, Access = FileAccess.Write };
        if (!OperatingSystem.IsWindows()) options.UnixCreateMode = UnixFileMode.UserRead | UnixFileMode.UserWrite;
        using var writer = new StreamWriter(new FileStream(path, options));
        writer.Write(pem);
    }
}
