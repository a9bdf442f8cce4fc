namespace Hpc.Jobs.Commands;

/// <summary>
/// The programs compiled into this executable beside hpcdata's own verbs. hpcdata compiled to native code carries the
/// cache host, node agent and stager too: one executable per CPU level instead of four, since the runtime, hosting and
/// libraries they share are then in it once (docs/deploy.md, "Size"). ComponentLocator starts such a program as
/// <c>hpcdata &lt;assembly&gt; ARGS</c>. The portable hpcdata carries none and starts their own assemblies.
/// </summary>
public static class LinkedPrograms
{
    private static readonly Dictionary<string, Func<string[], Task<int>>> Entries = new(StringComparer.Ordinal);

    internal static void Add(string assembly, Func<string[], Task<int>> run) => Entries[assembly] = run;

    /// <summary>The entry of <paramref name="assembly"/> when it is compiled into this executable, else null.</summary>
    public static Func<string[], Task<int>>? Find(string assembly) => Entries.GetValueOrDefault(assembly);
}
