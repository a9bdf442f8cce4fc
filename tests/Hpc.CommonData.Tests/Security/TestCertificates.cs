using System.Net;
using System.Security.Cryptography;
using System.Security.Cryptography.X509Certificates;

namespace Hpc.CommonData.Tests.Security;

/// <summary>
/// A throw-away certificate authority and a host certificate it signs (for 127.0.0.1 and localhost), written as PEM
/// files the way an administrator would deploy them; deleted on dispose.
/// </summary>
public sealed class TestCertificates : IDisposable
{
    public TestCertificates()
    {
        Directory = System.IO.Directory.CreateTempSubdirectory("hcd-tls-").FullName;
        using var caKey = ECDsa.Create(ECCurve.NamedCurves.nistP256);
        var caRequest = new CertificateRequest("CN=hpcdata test CA", caKey, HashAlgorithmName.SHA256);
        caRequest.CertificateExtensions.Add(new X509BasicConstraintsExtension(true, false, 0, true));
        caRequest.CertificateExtensions.Add(new X509KeyUsageExtension(X509KeyUsageFlags.KeyCertSign | X509KeyUsageFlags.CrlSign, true));
        var now = DateTimeOffset.UtcNow;
        using var ca = caRequest.CreateSelfSigned(now.AddMinutes(-5), now.AddDays(1));

        using var hostKey = ECDsa.Create(ECCurve.NamedCurves.nistP256);
        var hostRequest = new CertificateRequest("CN=cachehost", hostKey, HashAlgorithmName.SHA256);
        var names = new SubjectAlternativeNameBuilder();
        names.AddIpAddress(IPAddress.Loopback);
        names.AddDnsName("localhost");
        hostRequest.CertificateExtensions.Add(names.Build());
        hostRequest.CertificateExtensions.Add(new X509EnhancedKeyUsageExtension([new Oid("1.3.6.1.5.5.7.3.1")], false));
        hostRequest.CertificateExtensions.Add(new X509BasicConstraintsExtension(false, false, 0, false));
        using var host = hostRequest.Create(ca, now.AddMinutes(-5), now.AddDays(1), RandomNumberGenerator.GetBytes(8));

        CaFile = Write("ca.pem", ca.ExportCertificatePem());
        CertificateFile = Write("host.pem", host.ExportCertificatePem());
        KeyFile = Write("host.key", hostKey.ExportPkcs8PrivateKeyPem());
    }

    public string Directory { get; }
    public string CaFile { get; }
    public string CertificateFile { get; }
    public string KeyFile { get; }

    private string Write(string name, string pem)
    {
        var path = Path.Combine(Directory, name);
        File.WriteAllText(path, pem);
        return path;
    }

    public void Dispose()
    {
        try { System.IO.Directory.Delete(Directory, recursive: true); }
        catch (IOException) { }
    }
}
