using System.Buffers.Binary;
using System.Text.Json;
using Hpc.CommonData.Format;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;

namespace Hpc.NodeAgent;

/// <summary>
/// The layout of the agent's data directory, and nothing else:
/// <list type="bullet">
/// <item><c>complete/&lt;version&gt;.data</c> — published copies, read-only;</item>
/// <item><c>partial/&lt;version&gt;.data</c> — copies being fetched, with <c>partial/&lt;version&gt;.done</c>, the journal of
/// finished segment indexes (4-byte little-endian each, appended as segments land);</item>
/// <item><c>manifests/&lt;version&gt;.json</c> — the manifest of every copy, complete or partial;</item>
/// <item><c>pins.json</c> — pin names per version, so pins survive restarts.</item>
/// </list>
/// Paths are built only from version ids (32 hex digits), never from dataset names.
/// </summary>
public sealed class DataDirectory
{
    private readonly ILogger _log;
    private readonly string _complete, _partial, _manifests, _pinsFile;

    public DataDirectory(string root, ILogger? log = null)
    {
        _log = log ?? NullLogger.Instance;
        Root = Path.GetFullPath(root);
        _complete = Path.Combine(Root, "complete");
        _partial = Path.Combine(Root, "partial");
        _manifests = Path.Combine(Root, "manifests");
        _pinsFile = Path.Combine(Root, "pins.json");
        foreach (var d in new[] { _complete, _partial, _manifests }) Directory.CreateDirectory(d);
    }

    public string Root { get; }

    public string CompletePath(string version) => Path.Combine(_complete, Checked(version) + ".data");
    public string PartialPath(string version) => Path.Combine(_partial, Checked(version) + ".data");
    public string JournalPath(string version) => Path.Combine(_partial, Checked(version) + ".done");
    public string ManifestPath(string version) => Path.Combine(_manifests, Checked(version) + ".json");

    private static string Checked(string version) =>
        SegmentId.TryParse(version, out _) ? version : throw new ArgumentException($"'{version}' is not a version id");

    /// <summary>A data file found in <c>complete/</c> or <c>partial/</c>; <see cref="Name"/> is not yet known to be a version id.</summary>
    public sealed record DataFile(string Name, string Path, bool Complete, DateTime LastWriteUtc);

    public IEnumerable<DataFile> DataFiles() =>
        Directory.EnumerateFiles(_complete, "*.data").Select(f => new DataFile(System.IO.Path.GetFileNameWithoutExtension(f), f, true, File.GetLastWriteTimeUtc(f)))
            .Concat(Directory.EnumerateFiles(_partial, "*.data").Select(f => new DataFile(System.IO.Path.GetFileNameWithoutExtension(f), f, false, File.GetLastWriteTimeUtc(f))));

    /// <summary>The stored manifest of a version, checked against the version id (which is the hash of its bytes).</summary>
    public Manifest ReadManifest(string version)
    {
        var path = ManifestPath(version);
        if (!File.Exists(path)) throw new InvalidDataException("no manifest");
        var bytes = File.ReadAllBytes(path);
        if (Manifest.VersionOf(bytes) != version) throw new InvalidDataException("manifest does not match its version id");
        return Manifest.Parse(bytes);
    }

    public Task WriteManifestAsync(string version, Manifest manifest) => File.WriteAllBytesAsync(ManifestPath(version), manifest.Serialize());

    /// <summary>Stores a manifest's bytes as received (they hash to <paramref name="version"/>).</summary>
    public Task WriteManifestAsync(string version, ReadOnlyMemory<byte> serialized) => File.WriteAllBytesAsync(ManifestPath(version), serialized);

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
    public FileStream OpenJournal(string version) => new(JournalPath(version), FileMode.Append, FileAccess.Write, FileShare.Read, 4096);

    public static void AppendJournal(FileStream journal, int index)
    {
        Span<byte> entry = stackalloc byte[4];
        BinaryPrimitives.WriteInt32LittleEndian(entry, index);
        journal.Write(entry);
    }

    /// <summary>Makes a finished partial copy read-only and moves it to its published name, atomically; drops its journal.</summary>
    public void Publish(string version)
    {
        var partial = PartialPath(version);
        if (OperatingSystem.IsWindows()) File.SetAttributes(partial, FileAttributes.ReadOnly);
        else File.SetUnixFileMode(partial, UnixFileMode.UserRead | UnixFileMode.GroupRead | UnixFileMode.OtherRead);
        File.Move(partial, CompletePath(version), overwrite: true);
        TryDelete(JournalPath(version));
    }

    /// <summary>Removes every file of a version: its data (complete or partial), journal and manifest.</summary>
    public void Delete(string version)
    {
        TryDelete(CompletePath(version));
        TryDelete(PartialPath(version));
        TryDelete(JournalPath(version));
        TryDelete(ManifestPath(version));
    }

    public void DeleteJournal(string version) => TryDelete(JournalPath(version));

    /// <summary>Pin names per version; empty (with a warning) when the file is missing or unreadable.</summary>
    public Dictionary<string, string[]> ReadPins()
    {
        try
        {
            return File.Exists(_pinsFile) ? JsonSerializer.Deserialize<Dictionary<string, string[]>>(File.ReadAllBytes(_pinsFile)) ?? [] : [];
        }
        catch (JsonException e)
        {
            _log.LogWarning("Ignoring unreadable {File}: {Reason}", _pinsFile, e.Message);
            return [];
        }
    }

    /// <summary>Replaces pins.json atomically (written aside, then renamed over).</summary>
    public void SavePins(IReadOnlyDictionary<string, string[]> pins)
    {
        var tmp = _pinsFile + ".tmp";
        File.WriteAllBytes(tmp, JsonSerializer.SerializeToUtf8Bytes(pins));
        File.Move(tmp, _pinsFile, overwrite: true);
    }

    public void TryDelete(string path)
    {
        try { File.Delete(path); }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException) { _log.LogWarning("Could not delete {Path}: {Reason}", path, e.Message); }
    }
}
