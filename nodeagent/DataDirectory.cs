using System.Buffers.Binary;
using System.Text.Json;
using Hpc.CommonData.Access;
using Hpc.CommonData.Fetch;
using Hpc.CommonData.Format;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;

namespace Hpc.NodeAgent;

/// <summary>
/// The layout of the agent's data directory, and nothing else:
/// <list type="bullet">
/// <item><c>complete/&lt;version&gt;.data</c> — published copies of single-file datasets, read-only;</item>
/// <item><c>complete/&lt;version&gt;/</c> — published copies of directory datasets: the tree itself (directories, files,
/// links, times), read-only, so any program can read its files (see <see cref="DatasetFiles"/>);</item>
/// <item><c>partial/&lt;version&gt;.data</c> or <c>partial/&lt;version&gt;/</c> — copies being fetched, with
/// <c>partial/&lt;version&gt;.done</c>, the journal of finished segment indexes (4-byte little-endian each, appended as
/// segments land);</item>
/// <item><c>manifests/&lt;version&gt;.json</c> — the manifest of every copy, complete or partial;</item>
/// <item><c>pins.json</c> — the pins of each version (name and the uid that pinned it), so pins and their owners
/// survive restarts;</item>
/// <item><c>telemetry.jsonl</c> — one line per fetch, unless the agent's --telemetry says otherwise.</item>
/// </list>
/// Paths are built only from version ids (32 hex digits), never from dataset names.
/// <para>On Linux the tree belongs to the agent's user and others may only pass through it: the root and
/// <c>complete/</c> are 0711 (no listing), <c>partial/</c> and <c>manifests/</c> 0700. A published copy is readable by
/// everyone (0444) when its version names no readers; otherwise by the agent's user and, through a POSIX access ACL,
/// by exactly the version's readers (see <see cref="ApplyReadAccess"/>).</para>
/// </summary>
public sealed class DataDirectory
{
    private readonly ILogger _log;
    private readonly string _complete, _partial, _manifests, _pinsFile;

    private readonly AgentFiles _files;

    /// <param name="files">How the agent's own files are created (owner-only when null).</param>
    public DataDirectory(string root, ILogger? log = null, AgentFiles? files = null)
    {
        _log = log ?? NullLogger.Instance;
        _files = files ?? new AgentFiles(log: _log);
        Root = Path.GetFullPath(root);
        _complete = Path.Combine(Root, "complete");
        _partial = Path.Combine(Root, "partial");
        _manifests = Path.Combine(Root, "manifests");
        _pinsFile = Path.Combine(Root, "pins.json");
        foreach (var d in new[] { _complete, _partial, _manifests }) Directory.CreateDirectory(d);
        if (!OperatingSystem.IsWindows())
        {
            RestrictTree();
            RestrictOwnFiles();
        }
    }

    /// <summary>
    /// The agent's own files that an older agent left with its umask (typically 0644): the root's (pins, telemetry)
    /// are reachable by anyone who guesses their names, the others would be once a folder's mode is widened.
    /// </summary>
    private void RestrictOwnFiles()
    {
        var own = Directory.EnumerateFiles(Root)
            .Concat(Directory.EnumerateFiles(_manifests))
            .Concat(Directory.EnumerateFiles(_partial, "*.done"));
        foreach (var file in own) _files.Restrict(file);
    }

    private const UnixFileMode Traversable = UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute |
                                             UnixFileMode.GroupExecute | UnixFileMode.OtherExecute;
    private const UnixFileMode Private = UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute;
    private const UnixFileMode OwnerRead = UnixFileMode.UserRead;
    private const UnixFileMode EveryoneRead = UnixFileMode.UserRead | UnixFileMode.GroupRead | UnixFileMode.OtherRead;
    private int _aclWarned;

    /// <summary>
    /// Workers of other users must pass through the tree to the copies they may read, but must not list it nor reach
    /// partial copies and manifests. A root shared with others (sticky, like /tmp) is left as it is: the tree's own
    /// folders are the gate then.
    /// </summary>
    [System.Runtime.Versioning.UnsupportedOSPlatform("windows")]
    private void RestrictTree()
    {
        try
        {
            if (!File.GetUnixFileMode(Root).HasFlag(UnixFileMode.StickyBit)) File.SetUnixFileMode(Root, Traversable);
            File.SetUnixFileMode(_complete, Traversable);
            File.SetUnixFileMode(_partial, Private);
            File.SetUnixFileMode(_manifests, Private);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            _log.DataDirectoryNotRestricted(Root, e.Message);
        }
    }

    public string Root { get; }

    public string CompletePath(string version) => Path.Combine(_complete, Checked(version) + ".data");
    public string PartialPath(string version) => Path.Combine(_partial, Checked(version) + ".data");

    /// <summary>The published copy of <paramref name="version"/>: its file, or the root of its tree when <paramref name="m"/> is laid out as one.</summary>
    public string CompletePath(string version, Manifest m) => DatasetFiles.IsTreeLayout(m) ? Path.Combine(_complete, Checked(version)) : CompletePath(version);

    /// <summary>The copy of <paramref name="version"/> being fetched: its file, or the root of its tree.</summary>
    public string PartialPath(string version, Manifest m) => DatasetFiles.IsTreeLayout(m) ? Path.Combine(_partial, Checked(version)) : PartialPath(version);

    /// <summary>Opens the published copy of <paramref name="version"/> for reading.</summary>
    public DatasetFiles OpenComplete(string version, Manifest m) => DatasetFiles.Open(CompletePath(version, m), m, writable: false);

    /// <summary>Creates or reopens the copy of <paramref name="version"/> being fetched (a partial tree left read-only by an interrupted publish is opened up again).</summary>
    public DatasetFiles CreatePartial(string version, Manifest m)
    {
        var path = PartialPath(version, m);
        if (DatasetFiles.IsTreeLayout(m) && Directory.Exists(path)) TreeWriter.OpenUp(path);
        return DatasetFiles.Create(path, m);
    }
    public string JournalPath(string version) => Path.Combine(_partial, Checked(version) + ".done");
    public string ManifestPath(string version) => Path.Combine(_manifests, Checked(version) + ".json");

    private static string Checked(string version) =>
        SegmentId.TryParse(version, out _) ? version : throw new ArgumentException($"'{version}' is not a version id");

    /// <summary>A data file found in <c>complete/</c> or <c>partial/</c>; <see cref="Name"/> is not yet known to be a version id.</summary>
    public sealed record DataFile(string Name, string Path, bool Complete, DateTime LastWriteUtc);

    public IEnumerable<DataFile> DataFiles() =>
        Directory.EnumerateFiles(_complete, "*.data").Select(f => new DataFile(System.IO.Path.GetFileNameWithoutExtension(f), f, true, File.GetLastWriteTimeUtc(f)))
            .Concat(Directory.EnumerateDirectories(_complete).Select(d => new DataFile(System.IO.Path.GetFileName(d), d, true, Directory.GetLastWriteTimeUtc(d))))
            .Concat(Directory.EnumerateFiles(_partial, "*.data").Select(f => new DataFile(System.IO.Path.GetFileNameWithoutExtension(f), f, false, File.GetLastWriteTimeUtc(f))))
            .Concat(Directory.EnumerateDirectories(_partial).Select(d => new DataFile(System.IO.Path.GetFileName(d), d, false, Directory.GetLastWriteTimeUtc(d))));

    /// <summary>The stored manifest of a version, checked against the version id (which is the hash of its bytes).</summary>
    public Manifest ReadManifest(string version)
    {
        var path = ManifestPath(version);
        if (!File.Exists(path)) throw new InvalidDataException("no manifest");
        var bytes = File.ReadAllBytes(path);
        if (Manifest.VersionOf(bytes) != version) throw new InvalidDataException("manifest does not match its version id");
        return Manifest.Parse(bytes);
    }

    public Task WriteManifestAsync(string version, Manifest manifest) => _files.WriteAllAsync(ManifestPath(version), manifest.Serialize());

    /// <summary>Stores a manifest's bytes as received (they hash to <paramref name="version"/>).</summary>
    public Task WriteManifestAsync(string version, ReadOnlyMemory<byte> serialized) => _files.WriteAllAsync(ManifestPath(version), serialized);

    /// <summary>The segment indexes a partial copy's journal records, in the order written (unverified, possibly repeated).</summary>
    public int[] ReadJournal(string version)
    {
        var path = JournalPath(version);
        if (!File.Exists(path)) return [];
        var bytes = File.ReadAllBytes(path);
        var entries = new int[bytes.Length / 4];
        for (var i = 0; i < entries.Length; i++) entries[i] = BinaryPrimitives.ReadInt32LittleEndian(bytes.AsSpan(i * 4));
        return entries;
    }

    /// <summary>Opens a partial copy's journal for appending; write entries with <see cref="AppendJournal"/>.</summary>
    /// <remarks>
    /// Unbuffered: each entry is its own write, so an agent killed outright loses no verified segment from its journal
    /// (a 4 KB buffer held the last 1,024 entries — 64 MB of verified data — in the dead process). One small write per
    /// 64 KB segment costs nothing next to the segment's own.
    /// </remarks>
    public FileStream OpenJournal(string version) => _files.Open(JournalPath(version), FileMode.Append, FileAccess.Write, FileShare.Read, bufferSize: 0);

    public static void AppendJournal(FileStream journal, int index)
    {
        Span<byte> entry = stackalloc byte[4];
        BinaryPrimitives.WriteInt32LittleEndian(entry, index);
        journal.Write(entry);
    }

    /// <summary>
    /// Makes a finished partial copy read-only — readable by <paramref name="readers"/> only, when the version names
    /// them — and moves it to its published name, atomically; drops its journal. The access is set before the rename,
    /// so the copy is never visible with wider access than its version allows.
    /// </summary>
    public void Publish(string version, Manifest manifest)
    {
        var partial = PartialPath(version, manifest);
        var complete = CompletePath(version, manifest);
        if (!DatasetFiles.IsTreeLayout(manifest))
        {
            if (OperatingSystem.IsWindows()) File.SetAttributes(partial, FileAttributes.ReadOnly);
            else ApplyReadAccess(partial, manifest.Readers);
            File.Move(partial, complete, overwrite: true);
        }
        else
        {
            // Inside, the tree is read-only for whoever may enter it; its root decides who may. The root stays owner-only
            // while it moves (renaming a directory needs write on it) and gets its readers' access once in place.
            TreeWriter.Finish(partial, manifest.Files!, readOnly: true);
            if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(partial, Private);
            if (Directory.Exists(complete)) TreeWriter.Delete(complete);
            Directory.Move(partial, complete);
            if (!OperatingSystem.IsWindows()) ApplyReadAccess(complete, manifest.Readers, directory: true);
        }
        TryDelete(JournalPath(version));
    }

    /// <summary>
    /// Read-only access to a copy for exactly <paramref name="readers"/> (null: everyone, 0444). On Linux a named list
    /// becomes a POSIX access ACL: owner r, each reader user and group r, owning group and others nothing. A file system
    /// without ACLs leaves the copy readable by the agent's user only (0400) — never by more than the readers — and is
    /// reported once: workers of other users then get restricted datasets over the pipe (stream mode), still checked.
    /// </summary>
    [System.Runtime.Versioning.UnsupportedOSPlatform("windows")]
    public void ApplyReadAccess(string path, DatasetReaders? readers, bool directory = false)
    {
        // A tree's root must also be entered (x) and listed (r): readers get r-x where a file's get r.
        var everyone = directory ? EveryoneRead | UnixFileMode.UserExecute | UnixFileMode.GroupExecute | UnixFileMode.OtherExecute : EveryoneRead;
        if (readers is null)
        {
            File.SetUnixFileMode(path, everyone);
            return;
        }
        File.SetUnixFileMode(path, directory ? OwnerRead | UnixFileMode.UserExecute : OwnerRead); // what remains if the ACL cannot be set
        if (!OperatingSystem.IsLinux()) return;
        var permissions = directory ? (ushort)(PosixAcl.Read | PosixAcl.Execute) : PosixAcl.Read;
        var errno = PosixAcl.TrySet(path, PosixAcl.Encode(readers, permissions, permissions));
        if (errno != 0 && Interlocked.Exchange(ref _aclWarned, 1) == 0)
            _log.NoPosixAcls(Root, errno);
    }

    /// <summary>Removes every file of a version: its data (complete or partial), journal and manifest.</summary>
    public void Delete(string version)
    {
        TryDelete(CompletePath(version));
        TryDelete(PartialPath(version));
        TryDeleteTree(Path.Combine(_complete, Checked(version)));
        TryDeleteTree(Path.Combine(_partial, Checked(version)));
        TryDelete(JournalPath(version));
        TryDelete(ManifestPath(version));
    }

    public void DeleteJournal(string version) => TryDelete(JournalPath(version));

    /// <summary>
    /// The pins of each version; empty (with a warning) when the file is missing or unreadable. A file written before
    /// pins had owners lists bare names: those pins are kept with <see cref="AccessPolicy.NoOwner"/>, so only root and
    /// the agent's user may drop them — nobody can claim them.
    /// </summary>
    public Dictionary<string, Pin[]> ReadPins()
    {
        if (!File.Exists(_pinsFile)) return [];
        try
        {
            using var document = JsonDocument.Parse(File.ReadAllBytes(_pinsFile));
            var pins = new Dictionary<string, Pin[]>();
            var unowned = 0;
            foreach (var version in document.RootElement.EnumerateObject())
                pins[version.Name] = version.Value.EnumerateArray().Select(p =>
                {
                    if (p.ValueKind == JsonValueKind.String) { unowned++; return new Pin(p.GetString()!, AccessPolicy.NoOwner); }
                    return new Pin(p.GetProperty("name").GetString() ?? throw new InvalidDataException("a pin without a name"), p.GetProperty("owner").GetUInt32());
                }).ToArray();
            if (unowned > 0)
                _log.UnownedPins(_pinsFile, unowned);
            return pins;
        }
        catch (Exception e) when (e is JsonException or InvalidOperationException or InvalidDataException or KeyNotFoundException or FormatException)
        {
            _log.PinsUnreadable(_pinsFile, e.Message);
            return [];
        }
    }

    /// <summary>Replaces pins.json atomically (written aside, then renamed over).</summary>
    public void SavePins(IReadOnlyDictionary<string, Pin[]> pins)
    {
        var tmp = _pinsFile + ".tmp";
        var records = pins.ToDictionary(p => p.Key, p => p.Value.Select(pin => new PinRecord(pin.Name, pin.Owner)).ToArray());
        _files.WriteAll(tmp, JsonSerializer.SerializeToUtf8Bytes(records, NodeAgentJson.Default.DictionaryStringPinRecordArray));
        File.Move(tmp, _pinsFile, overwrite: true);
    }

    private void TryDeleteTree(string path)
    {
        try { TreeWriter.Delete(path); }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException) { _log.DeleteFailed(path, e.Message); }
    }

    public void TryDelete(string path)
    {
        if (Directory.Exists(path) && new FileInfo(path).LinkTarget is null)
        {
            TryDeleteTree(path);
            return;
        }
        try { File.Delete(path); }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException) { _log.DeleteFailed(path, e.Message); }
    }
}
