using System.Diagnostics;
using Hpc.CommonData;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;
using Hpc.CommonData.Tests.Security;

namespace Hpc.Integration.Tests;

/// <summary>
/// The cache tier over TLS: a host serving a certificate signed by the site's CA, a stager and an agent that verify
/// it, stock redis-cli speaking TLS to it, and clients that do not trust the certificate or do not speak TLS refused.
/// </summary>
public sealed class TlsTests : IDisposable
{
    private readonly TestCertificates _certificates = new();

    [Fact]
    public async Task A_dataset_is_staged_and_fetched_over_TLS_with_the_host_certificate_verified()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync(o => { o.TlsCertificateFile = _certificates.CertificateFile; o.TlsKeyFile = _certificates.KeyFile; });
        var bytes = Cluster.Csvish(700_000);
        var path = Cluster.WriteFile(c.Root, "d.csv", bytes);

        var (staged, _, stageErr) = await c.RunAsync("Hpc.Stager", [path, "--name", "tls/data", "--cache-hosts", c.HostList, "--cache-ca", _certificates.CaFile]);
        Assert.True(staged == 0, stageErr);

        var pipe = $"hcdtls{Environment.ProcessId}";
        var agent = c.Track(ComponentProcess.Start("Hpc.NodeAgent", ProgramContract<NodeAgentOptions>.ToArguments(new NodeAgentOptions
        {
            Pipe = pipe, DataDirectory = Path.Combine(c.Root, "agent"),
            CacheTier = new CacheTierOptions { Hosts = c.Hosts.ToList(), TlsCaFile = _certificates.CaFile },
        }), name: "agent"));
        await agent.WaitReadyAsync(TimeSpan.FromSeconds(30));
        await using var data = await Dataset.OpenAsync("tls/data", Cluster.Via(pipe));
        Assert.Equal(bytes, data.GetSpan(0, bytes.Length).ToArray());
    }

    [Fact]
    public async Task A_client_that_does_not_trust_the_certificate_or_does_not_speak_TLS_gets_nothing_and_is_told_why()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync(o => { o.TlsCertificateFile = _certificates.CertificateFile; o.TlsKeyFile = _certificates.KeyFile; });
        using var otherSite = new TestCertificates();

        await using (var wrongCa = new CacheTierClient(new CacheTierOptions { Hosts = c.Hosts.ToList(), TlsCaFile = otherSite.CaFile, MaxAttempts = 1 }))
        {
            var refused = await Assert.ThrowsAsync<CommonDataException>(() => wrongCa.GetLatestAsync("tls/data"));
            Assert.Equal(ErrorCode.AccessDenied, refused.Code);
            Assert.Contains("TLS handshake failed", refused.Message);
            Assert.Contains("the CA that signed the cache hosts' certificates?", refused.Message);
        }
        // The system's roots do not include the site's CA either, and the refusal says where a site's CA is given.
        await using (var systemRoots = new CacheTierClient(new CacheTierOptions { Hosts = c.Hosts.ToList(), Tls = true, MaxAttempts = 1 }))
        {
            var untrusted = await Assert.ThrowsAsync<CommonDataException>(() => systemRoots.GetLatestAsync("tls/data"));
            Assert.Equal(ErrorCode.AccessDenied, untrusted.Code);
            Assert.Contains("give --cache-ca PATH or set HPCDATA_CACHE_CA", untrusted.Message);
        }

        await using var plain = new CacheTierClient(new CacheTierOptions { Hosts = c.Hosts.ToList(), MaxAttempts = 1, OperationTimeout = TimeSpan.FromSeconds(15) });
        var notTls = await Assert.ThrowsAsync<CommonDataException>(() => plain.GetLatestAsync("tls/data"));
        Assert.Equal(ErrorCode.AccessDenied, notTls.Code);
        Assert.Contains("accepts TLS connections only", notTls.Message);

        await using var trusted = new CacheTierClient(new CacheTierOptions { Hosts = c.Hosts.ToList(), TlsCaFile = _certificates.CaFile });
        Assert.Null(await trusted.GetLatestAsync("tls/data"));
    }

    [Fact]
    public async Task A_stage_without_TLS_against_a_TLS_only_host_fails_at_once_in_one_line_that_says_to_use_TLS()
    {
        await using var c = new Cluster();
        var users = Cluster.WriteFile(c.Root, "users", "stager writer w-pass\nnames stager *\n"u8.ToArray());
        await c.StartCacheHostAsync(o => { o.TlsCertificateFile = _certificates.CertificateFile; o.TlsKeyFile = _certificates.KeyFile; o.UsersFile = users; });
        var path = Cluster.WriteFile(c.Root, "d.csv", Cluster.Csvish(10_000));

        // Open, and with an account (whose AUTH is then the first thing the host hears).
        foreach (var env in new[] { null, new Dictionary<string, string?> { [CacheTierOptions.UserVariable] = "stager", [CacheTierOptions.PasswordVariable] = "w-pass" } })
        {
            var (code, _, stderr) = await c.RunAsync("Hpc.Stager", [path, "--name", "tls/plain", "--cache-hosts", c.HostList], env);
            Assert.NotEqual(0, code);
            var lines = stderr.Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
            Assert.Single(lines, l => l.Contains("accepts TLS connections only") && l.Contains("--cache-tls"));
            Assert.DoesNotContain(lines, l => l.Contains("retry") || l.Contains("attempts"));
        }
    }

    [Fact]
    public async Task Redis_cli_talks_to_the_host_over_TLS()
    {
        await using var c = new Cluster();
        var address = await c.StartCacheHostAsync(o => { o.TlsCertificateFile = _certificates.CertificateFile; o.TlsKeyFile = _certificates.KeyFile; });
        var endpoint = CacheEndpoint.Parse(address);
        string Cli(params string[] args)
        {
            var start = new ProcessStartInfo("redis-cli") { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
            foreach (var a in (string[])["-h", endpoint.Host, "-p", endpoint.Port.ToString(), "--tls", "--cacert", _certificates.CaFile, .. args])
                start.ArgumentList.Add(a);
            using var p = Process.Start(start)!;
            var output = p.StandardOutput.ReadToEndAsync();
            var error = p.StandardError.ReadToEndAsync();
            Assert.True(p.WaitForExit(TimeSpan.FromSeconds(60)), "redis-cli did not finish");
            return (output.Result + error.Result).Trim();
        }

        Assert.Equal("OK", Cli("SET", "greeting", "over tls"));
        Assert.Equal("over tls", Cli("GET", "greeting"));
        Assert.Contains("redis_version:", Cli("INFO", "server"));
    }

    public void Dispose() => _certificates.Dispose();
}
