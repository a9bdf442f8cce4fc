using Hpc.CommonData.Hosting;
using Hpc.CommonData.Security;

using Hpc.CommonData.Cli;
using Hpc.Jobs.Cli;

namespace Hpc.Jobs.Commands;

public sealed class TlsInitOptions : IVerbOptions
{
    public static string Verb => "tls-init";

    public static string Summary => "Create a site CA (once) and a cache-host certificate it signs, as PEM files: host.pem and host.key for the hosts, ca.pem for every client.";

    [Switch("--out", "Directory for ca.pem, ca.key, host.pem, host.key; an existing CA there is reused.", Required = true, Meta = "DIR")]
    public string Out { get; set; } = "";

    [Switch("--hosts", "Names the cache hosts are reached by, as clients spell them in --cache-hosts: DNS names and IP addresses, comma-separated.", Required = true, Meta = "NAMES")]
    public string Hosts { get; set; } = "";

    [Switch("--days", "Validity of the host certificate in days (the CA lasts four times as long).")]
    public int Days { get; set; } = 365;
}

/// <summary>Exit codes: 0 written; else the failure's (<see cref="ExitCodes"/>: 77 not allowed to write there, 73 no room); 2 bad usage.</summary>
public static class TlsInitCommand
{
    public static int Run(TlsInitOptions o)
    {
        var hosts = o.Hosts.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
        if (hosts.Length == 0 || o.Days < 1)
        {
            throw CommandException.Usage("give --hosts NAME,… and --days of at least 1");
        }
        try
        {
            var files = SiteCertificates.Create(o.Out, hosts, TimeSpan.FromDays(o.Days));
            Console.WriteLine($"cache hosts: --tls-cert {files.CertificateFile} --tls-key {files.KeyFile}");
            Console.WriteLine($"clients:     --cache-ca {files.CaFile} (or HPCDATA_CACHE_CA); keep {files.CaKeyFile} offline");
            return 0;
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or System.Security.Cryptography.CryptographicException)
        {
            throw CommandException.From(e);
        }
    }
}
