using Hpc.CommonData.Hosting;
using Microsoft.Extensions.Configuration;

namespace Hpc.NodeAgent;

/// <summary>The agent's settings from its configuration (appsettings.json under the command line and variables), checked.</summary>
public static class AgentConfiguration
{
    /// <summary>
    /// Binds section "Agent" and validates it. Returns null and the options, or the first problem as one sentence
    /// (a value that does not convert, a budget of 0, no cache hosts, …).
    /// </summary>
    /// <param name="commandLine">What <see cref="ProgramContract{T}.Handle"/> returned: command line over documented variables.</param>
    public static string? Bind(IConfiguration configuration, IReadOnlyDictionary<string, string?> commandLine, out NodeAgentOptions options)
    {
        options = new NodeAgentOptions();
        try
        {
            configuration.GetSection(NodeAgentOptions.SectionName).Bind(options);
        }
        catch (InvalidOperationException e)
        {
            return e.InnerException is { } inner ? $"{e.Message} {inner.Message}" : e.Message;
        }
        // Configuration layers lists item by item: two hosts from appsettings.json under one from the command line would
        // bind as two. A host list given on the command line or in HPCDATA_CACHE_HOSTS is the whole list.
        var hostsKey = $"{NodeAgentOptions.SectionName}:{nameof(NodeAgentOptions.CacheTier)}:{nameof(options.CacheTier.Hosts)}:";
        var hosts = commandLine.Where(kv => kv.Key.StartsWith(hostsKey, StringComparison.OrdinalIgnoreCase) && kv.Value is not null).ToList();
        if (hosts.Count > 0 && options.CacheTier is not null)
            options.CacheTier.Hosts = hosts.OrderBy(kv => int.TryParse(kv.Key[hostsKey.Length..], out var i) ? i : int.MaxValue).Select(kv => kv.Value!).ToList();
        if (options.Validate().FirstOrDefault() is { } problem) return problem;
        try { options.CacheTier!.LoadPasswordFile(); }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException) { return $"--cache-password-file: {e.Message}"; }
        try { Directory.CreateDirectory(options.DataDirectory); }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException) { return $"--data-dir '{options.DataDirectory}' cannot be used: {e.Message}"; }
        return null;
    }

    /// <summary>
    /// <see cref="ProgramContract{T}.Handle"/> lays the command line over the environment key by key, so
    /// <c>--cache-hosts a</c> over <c>HPCDATA_CACHE_HOSTS=b,c</c> would come out as <c>a,c</c>. A list given on the command
    /// line replaces the environment's: the environment's items that the command line did not set are dropped.
    /// </summary>
    public static IReadOnlyDictionary<string, string?> CommandLineListsWin(string[] args, IReadOnlyDictionary<string, string?> settings)
    {
        var typed = ProgramContract<NodeAgentOptions>.Parse(args).Settings;
        var lists = typed.Keys.Select(ListOf).OfType<string>().ToHashSet(StringComparer.OrdinalIgnoreCase);
        return settings.Where(kv => ListOf(kv.Key) is not { } list || !lists.Contains(list) || typed.ContainsKey(kv.Key))
            .ToDictionary(kv => kv.Key, kv => kv.Value, StringComparer.OrdinalIgnoreCase);
    }

    private static string? ListOf(string key) =>
        key.LastIndexOf(':') is var colon and > 0 && key.Length > colon + 1 && key[(colon + 1)..].All(char.IsAsciiDigit) ? key[..colon] : null;
}
