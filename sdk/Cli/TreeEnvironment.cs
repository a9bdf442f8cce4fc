using System.Text;

namespace Hpc.CommonData.Cli;

/// <summary>
/// What a job's processes need in their environment to use a node's copy of a software tree as it is: the copy's path
/// always, and for a tree that is a Python environment or an install prefix the variables its own activation would set.
/// Read from the published copy on the node (a few directory look-ups, never following a link), so the job needs no
/// knowledge of how the tree was built.
/// </summary>
/// <param name="Kind">What the tree was taken for: <c>python-venv</c>, <c>conda</c>, <c>python-packages</c>, <c>prefix</c>
/// (a <c>bin/</c> folder), <c>tree</c> (none of those) or <c>file</c> (a single-file dataset).</param>
/// <param name="Interpreter">The Python to run, where the tree brings its own (<c>bin/python</c> of a venv or conda
/// environment); null: the node's <c>python3</c>, with <see cref="Variables"/> putting the tree's packages on its path.</param>
public sealed record TreeEnvironment(string Path, string Kind, string? Interpreter, IReadOnlyList<TreeEnvironment.Variable> Variables)
{
    /// <summary>One variable: set to <paramref name="Value"/>, or, for a search path, <paramref name="Value"/> put in
    /// front of what the variable already holds.</summary>
    public sealed record Variable(string Name, string Value, bool Prepends);

    /// <summary>The tree's Python packages are looked for this deep (a staged <c>/usr</c> has them at
    /// <c>lib/python3/dist-packages</c>, a staged install prefix at <c>lib/python3.11/site-packages</c>).</summary>
    private const int PackageDepth = 4;

    /// <summary>Folders looked at, at most, while looking for packages: a tree of a million files costs no more.</summary>
    private const int PackageLookups = 2000;

    public static TreeEnvironment Of(string path)
    {
        var variables = new List<Variable> { new(JobVariables.DatasetPath, path, false) };
        if (!Directory.Exists(path)) return new(path, "file", null, variables);
        var bin = System.IO.Path.Combine(path, "bin");
        var python = System.IO.Path.Combine(bin, "python");
        var hasBin = IsDirectory(bin);
        var hasPython = hasBin && (File.Exists(python) || new FileInfo(python).LinkTarget is not null);
        if (hasPython && File.Exists(System.IO.Path.Combine(path, "pyvenv.cfg")))
        {
            // What a venv's own bin/activate sets; the interpreter finds its packages from pyvenv.cfg beside bin/.
            variables.Add(new("VIRTUAL_ENV", path, false));
            variables.Add(new("PATH", bin, true));
            return new(path, "python-venv", python, variables);
        }
        if (hasPython && IsDirectory(System.IO.Path.Combine(path, "conda-meta")))
        {
            variables.Add(new("CONDA_PREFIX", path, false));
            variables.Add(new("PATH", bin, true));
            return new(path, "conda", python, variables);
        }
        var packages = PackageFolders(path);
        if (packages.Count > 0) variables.Add(new("PYTHONPATH", string.Join(':', packages), true));
        if (hasBin) variables.Add(new("PATH", bin, true));
        return new(path, packages.Count > 0 ? "python-packages" : hasBin ? "prefix" : "tree", null, variables);
    }

    /// <summary>
    /// Where the tree's Python packages are: the shallowest <c>site-packages</c> and <c>dist-packages</c> folders, or the
    /// root itself when packages sit there (a staged <c>dist-packages</c>: a folder with <c>__init__.py</c>, a
    /// or a <c>.dist-info</c>). Links are not followed: a package reached through one is the node's, not the tree's.
    /// </summary>
    private static List<string> PackageFolders(string root)
    {
        if (HoldsPackages(root)) return [root];
        var found = new List<string>();
        var level = new List<string> { root };
        var lookups = 0;
        for (var depth = 0; depth < PackageDepth && level.Count > 0 && found.Count == 0; depth++)
        {
            var next = new List<string>();
            foreach (var folder in level)
            {
                if (++lookups > PackageLookups) return found;
                foreach (var child in Children(folder))
                {
                    var name = System.IO.Path.GetFileName(child);
                    if (name is "site-packages" or "dist-packages") found.Add(child);
                    else next.Add(child);
                }
            }
            level = next;
        }
        found.Sort(StringComparer.Ordinal);
        return found;
    }

    private static bool HoldsPackages(string folder)
    {
        foreach (var child in Children(folder))
        {
            if (child.EndsWith(".dist-info", StringComparison.Ordinal) || child.EndsWith(".egg-info", StringComparison.Ordinal)) return true;
            if (File.Exists(System.IO.Path.Combine(child, "__init__.py"))) return true;
        }
        return false;
    }

    private static IEnumerable<string> Children(string folder)
    {
        try
        {
            return new DirectoryInfo(folder).EnumerateDirectories()
                .Where(d => d.LinkTarget is null)
                .Select(d => d.FullName)
                .OrderBy(p => p, StringComparer.Ordinal)
                .ToList();
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException) { return []; }
    }

    private static bool IsDirectory(string path) => Directory.Exists(path) && new FileInfo(path).LinkTarget is null;

    /// <summary>The variables' values for a process whose environment is <paramref name="current"/> today.</summary>
    public IEnumerable<KeyValuePair<string, string>> Resolve(Func<string, string?> current) =>
        Variables.Select(v => new KeyValuePair<string, string>(v.Name,
            v.Prepends && current(v.Name) is { Length: > 0 } before ? v.Value + ":" + before : v.Value));

    /// <summary>POSIX shell lines that set the variables (for <c>eval</c> in a job script); a search path keeps what it held.</summary>
    public string ShellExports()
    {
        var s = new StringBuilder();
        foreach (var v in Variables)
        {
            var value = Quote.Sh(v.Value);
            s.Append(v.Prepends ? $"export {v.Name}={value}\"${{{v.Name}:+:${v.Name}}}\"\n" : $"export {v.Name}={value}\n");
        }
        return s.ToString();
    }

    /// <summary>The one-line summary a person reads: what the tree is and how to run its Python.</summary>
    public string Describe() => Kind switch
    {
        "python-venv" or "conda" => $"{Kind}: run {Interpreter} (or python with the job's PATH)",
        "python-packages" => $"python-packages: python3 finds them on PYTHONPATH={Variables.First(v => v.Name == "PYTHONPATH").Value}",
        "prefix" => $"prefix: {Variables.First(v => v.Name == "PATH").Value} on PATH",
        _ => Kind,
    };


}
