using System.Net.Security;
using System.Security.Cryptography.X509Certificates;

namespace Hpc.CommonData.Cache;

/// <summary>
/// How clients secure their connections to the cache hosts: TLS, with the host's certificate checked against the
/// system's trusted roots or, when given, only the certificate authorities in a PEM file (a site's own CA).
/// </summary>
public sealed class CacheTls
{
    private readonly X509Certificate2Collection? _roots;

    private CacheTls(X509Certificate2Collection? roots) => _roots = roots;

    /// <summary>Whether the hosts' certificates are checked against a CA file (--cache-ca), not the system's roots.</summary>
    public bool SiteCa => _roots is not null;

    /// <summary>Trusts <paramref name="caFile"/>'s certificates only, or the system store when it is null.</summary>
    public static CacheTls Create(string? caFile)
    {
        if (string.IsNullOrEmpty(caFile)) return new CacheTls(null);
        var roots = new X509Certificate2Collection();
        roots.ImportFromPemFile(caFile);
        if (roots.Count == 0) throw new CommonDataException(ErrorCode.BadRequest, $"--cache-ca '{caFile}' holds no PEM certificate");
        return new CacheTls(roots);
    }

    public SslClientAuthenticationOptions ClientOptions(string host)
    {
        var options = new SslClientAuthenticationOptions { TargetHost = host };
        if (_roots is not null)
        {
            // The host name is still checked (TargetHost); only the anchors of the chain change.
            options.CertificateChainPolicy = new X509ChainPolicy
            {
                TrustMode = X509ChainTrustMode.CustomRootTrust,
                RevocationMode = X509RevocationMode.NoCheck,
            };
            options.CertificateChainPolicy.CustomTrustStore.AddRange(_roots);
        }
        return options;
    }
}
