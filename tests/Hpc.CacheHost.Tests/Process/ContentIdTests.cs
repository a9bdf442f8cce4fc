using System.Buffers.Binary;
using System.Text;
using Hpc.CommonData.Format;

namespace Hpc.CacheHost.Tests.Process;

/// <summary>
/// Content ids are BLAKE3-256, and a writer's segment is stored under one only when its bytes hash to it: no writer can
/// plant other bytes under an id another owner's stage will find already on the tier. Keys of the XXH3-128 era and
/// segments in its format are refused, so none of them can stand in for a BLAKE3 id.
/// </summary>
[Collection(ProcessTests.Collection)]
public sealed class ContentIdTests : IDisposable
{
    private readonly string _usersFile = Path.GetTempFileName();
    private readonly CacheHostProcess _host;

    public ContentIdTests()
    {
        File.WriteAllText(_usersFile, "mallory writer mallory-pass\n");
        _host = CacheHostProcess.Start(o => o.UsersFile = _usersFile);
    }

    [Fact]
    public void Bytes_whose_BLAKE3_is_not_the_id_are_refused_even_with_a_valid_header_and_checksum()
    {
        using var mallory = Login();
        var wanted = StoredObjects.Segment("alice's prices of the day");
        var planted = StoredObjects.Segment("mallory's prices of the day");
        // A well-formed segment of other bytes, raw and LZ4 alike: header, lengths and XXH3-64 checksum all hold.
        Assert.Null(SegmentCodec.CheckStored(planted.Stored, planted.Entry.RawLength));
        var refusal = "NOPERM the value is not segment " + wanted.Entry.Id + ": segment " + wanted.Entry.Id + ": content hash mismatch";
        Assert.Equal(refusal, Refusal(mallory.Call("SET", wanted.Key, planted.Stored)));
        Assert.Equal(refusal, Refusal(mallory.Call("SET", wanted.Key, StoredObjects.Segment(new string('p', 4096)).Stored)));
        Assert.Equal(0L, mallory.Call("EXISTS", wanted.Key));
        Assert.Equal("OK", mallory.Call("SET", wanted.Key, wanted.Stored));
    }

    [Fact]
    public void A_key_named_by_an_XXH3_128_id_is_not_one_a_writer_may_store()
    {
        using var mallory = Login();
        var raw = Encoding.UTF8.GetBytes("prices staged before ids were BLAKE3");
        var legacy = Legacy(raw);
        var xxh3 = XxHash.Hash128Of(raw).ToString("x32");
        Assert.StartsWith("NOPERM hcd:s:" + xxh3 + " is not a key this system writes", Refusal(mallory.Call("SET", "hcd:s:" + xxh3, legacy)));
        Assert.StartsWith("NOPERM hcd:m:" + xxh3 + " is not a key this system writes", Refusal(mallory.Call("SET", "hcd:m:" + xxh3, legacy)));
        var version = StoredObjects.Version("mallory/old", StoredObjects.Segment("x").Entry);
        Assert.Equal("OK", mallory.Call("SET", version.Key, version.Stored));
        Assert.Equal("NOPERM the latest pointer of mallory/old must be a version id", Refusal(mallory.Call("SET", "hcd:latest:mallory/old", xxh3)));
    }

    [Fact]
    public void A_segment_in_the_XXH3_era_format_never_satisfies_a_BLAKE3_id_even_holding_the_right_bytes()
    {
        using var mallory = Login();
        var raw = Encoding.UTF8.GetBytes("prices staged before ids were BLAKE3");
        var key = "hcd:s:" + SegmentId.Of(raw);
        var refusal = Refusal(mallory.Call("SET", key, Legacy(raw)));
        Assert.StartsWith("NOPERM the value is not segment", refusal);
        Assert.Contains("format 1, named by XXH3-128", refusal);
        Assert.Equal(0L, mallory.Call("EXISTS", key));
    }

    /// <summary><paramref name="raw"/> stored raw as segment format 1 wrote it (XXH3-64 of the payload as the checksum).</summary>
    private static byte[] Legacy(byte[] raw)
    {
        var stored = new byte[SegmentCodec.HeaderLength + raw.Length];
        "HCS"u8.CopyTo(stored);
        stored[3] = SegmentCodec.LegacyFormatVersion;
        BinaryPrimitives.WriteInt32LittleEndian(stored.AsSpan(8), raw.Length);
        BinaryPrimitives.WriteInt32LittleEndian(stored.AsSpan(12), raw.Length);
        BinaryPrimitives.WriteUInt64LittleEndian(stored.AsSpan(16), XxHash.Hash64Of(raw));
        raw.CopyTo(stored, SegmentCodec.HeaderLength);
        return stored;
    }

    private static string Refusal(object? reply) => Assert.IsType<RespError>(reply).Message;

    private RespTestClient Login() => RespTestClient.LoggedIn(_host, "mallory", "mallory-pass");

    public void Dispose()
    {
        _host.Dispose();
        File.Delete(_usersFile);
    }
}
