using Hpc.CommonData.Security;

namespace Hpc.CommonData.Tests.Security;

/// <summary>A throw-away site CA and a host certificate for 127.0.0.1 and localhost, as PEM files; deleted on dispose.</summary>
public sealed class TestCertificates : IDisposable
{
    private readonly SiteCertificates _files;

    public TestCertificates()
    {
        Directory = System.IO.Directory.CreateTempSubdirectory("hcd-tls-").FullName;
        _files = SiteCertificates.Create(Directory, ["127.0.0.1", "localhost"], TimeSpan.FromDays(1));
    }

    public string Directory { get; }
    public string CaFile => _files.CaFile;
    public string CertificateFile => _files.CertificateFile;
    public string KeyFile => _files.KeyFile;

    public void Dispose()
    {
        try { System.IO.Directory.Delete(Directory, recursive: true); }
        catch (IOException) { }
    }
}
