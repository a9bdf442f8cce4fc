using System.Diagnostics;
using Hpc.CommonData.Cli;

namespace Hpc.Jobs.Tests;

/// <summary>What a job's environment gets for a node's copy of a software tree (<c>hpcdata path --shell</c>, the local scheduler).</summary>
public sealed class TreeEnvironmentTests : IDisposable
{
    private readonly string _root = Directory.CreateTempSubdirectory("hpcdata-treeenv").FullName;

    public void Dispose() => Directory.Delete(_root, recursive: true);

    private string Tree(string name, params string[] files)
    {
        var tree = Path.Combine(_root, name);
        Directory.CreateDirectory(tree);
        foreach (var f in files)
        {
            var full = Path.Combine(tree, f);
            Directory.CreateDirectory(Path.GetDirectoryName(full)!);
            File.WriteAllText(full, "");
        }
        return tree;
    }

    [Fact]
    public void A_virtual_environment_is_activated_as_its_own_activate_script_would_its_interpreter_a_link_out_of_the_tree()
    {
        var venv = Tree("venv", "pyvenv.cfg", "lib/python3.11/site-packages/riskkit/__init__.py");
        Directory.CreateDirectory(Path.Combine(venv, "bin"));
        File.CreateSymbolicLink(Path.Combine(venv, "bin", "python"), "/usr/bin/python3");

        var env = TreeEnvironment.Of(venv);

        Assert.Equal("python-venv", env.Kind);
        Assert.Equal(Path.Combine(venv, "bin", "python"), env.Interpreter);
        Assert.Equal([JobVariables.DatasetPath, "VIRTUAL_ENV", "PATH"], env.Variables.Select(v => v.Name));
        Assert.DoesNotContain(env.Variables, v => v.Name == "PYTHONPATH"); // the interpreter finds its packages from pyvenv.cfg
    }

    [Fact]
    public void A_conda_environment_puts_its_bin_first_on_PATH_and_names_its_prefix()
    {
        var conda = Tree("conda", "conda-meta/history", "bin/python");
        var env = TreeEnvironment.Of(conda);
        Assert.Equal("conda", env.Kind);
        Assert.Contains(env.Variables, v => v is { Name: "CONDA_PREFIX" } && v.Value == conda);
        Assert.Contains(env.Variables, v => v is { Name: "PATH", Prepends: true } && v.Value == Path.Combine(conda, "bin"));
    }

    [Fact]
    public void A_staged_dist_packages_folder_is_itself_the_PYTHONPATH_entry()
    {
        var packages = Tree("dist", "numpy/__init__.py", "numpy-1.24.2.dist-info/METADATA", "six.py");
        var env = TreeEnvironment.Of(packages);
        Assert.Equal("python-packages", env.Kind);
        Assert.Null(env.Interpreter);
        Assert.Contains(env.Variables, v => v is { Name: "PYTHONPATH", Prepends: true } && v.Value == packages);
    }

    [Fact]
    public void A_staged_prefix_gets_its_deepest_package_folders_on_PYTHONPATH_and_its_bin_on_PATH()
    {
        var usr = Tree("usr", "bin/f2py", "lib/python3/dist-packages/numpy/__init__.py", "local/lib/python3.11/site-packages/x/__init__.py");
        var env = TreeEnvironment.Of(usr);
        Assert.Equal("python-packages", env.Kind);
        // The shallowest package folders found: lib/python3/dist-packages is three levels down, the local one four.
        Assert.Equal(Path.Combine(usr, "lib", "python3", "dist-packages"), env.Variables.Single(v => v.Name == "PYTHONPATH").Value);
        Assert.Equal(Path.Combine(usr, "bin"), env.Variables.Single(v => v.Name == "PATH").Value);
    }

    [Fact]
    public void Packages_reached_only_through_a_link_are_the_node_s_not_the_tree_s_and_are_not_put_on_the_path()
    {
        var tree = Tree("linked", "data/readme.txt");
        Directory.CreateSymbolicLink(Path.Combine(tree, "lib"), "/usr/lib");
        var env = TreeEnvironment.Of(tree);
        Assert.Equal("tree", env.Kind);
        Assert.Equal([JobVariables.DatasetPath], env.Variables.Select(v => v.Name));
    }

    [Fact]
    public void A_single_file_dataset_has_only_its_path()
    {
        var file = Path.Combine(_root, "prices.bin");
        File.WriteAllText(file, "x");
        var env = TreeEnvironment.Of(file);
        Assert.Equal("file", env.Kind);
        Assert.Equal([JobVariables.DatasetPath], env.Variables.Select(v => v.Name));
    }

    [Fact]
    public void Search_paths_keep_what_they_held_both_resolved_and_in_the_shell_lines()
    {
        var tree = Tree("it's a tree", "pkg/__init__.py", "bin/tool");
        var env = TreeEnvironment.Of(tree);
        var resolved = env.Resolve(name => name == "PATH" ? "/usr/bin:/bin" : null).ToDictionary();
        Assert.Equal(Path.Combine(tree, "bin") + ":/usr/bin:/bin", resolved["PATH"]);
        Assert.Equal(tree, resolved["PYTHONPATH"]); // nothing before: no empty entry, which Python would take for the working directory

        if (!OperatingSystem.IsLinux()) return;
        var sh = new ProcessStartInfo("/bin/sh", ["-c", env.ShellExports() + "printf '%s\\n' \"$HPCDATA_DATASET_PATH\" \"$PATH\" \"$PYTHONPATH\""])
            { RedirectStandardOutput = true };
        sh.Environment["PATH"] = "/usr/bin:/bin";
        sh.Environment.Remove("PYTHONPATH");
        using var p = Process.Start(sh)!;
        var lines = p.StandardOutput.ReadToEnd().Split('\n');
        p.WaitForExit();
        Assert.Equal([tree, Path.Combine(tree, "bin") + ":/usr/bin:/bin", tree], lines[..3]);
    }
}
