using System.Buffers.Binary;

namespace Hpc.CommonData.Fanout;

/// <summary>
/// One block on the ring: <c>"HCB1"</c>, share, first segment index, record count, message length (int32 LE each), then per
/// segment its index and stored length (int32 LE) and the stored bytes exactly as the cache tier holds them —
/// compressed and still checksummed, so every hop can check them and the last one verifies them fully.
/// </summary>
public static class BlockMessage
{
    public const int HeaderLength = 20;
    public const int RecordHeaderLength = 8;
    private const uint Magic = 0x31424348; // "HCB1"

    public static void WriteHeader(Span<byte> message, Block block, int length)
    {
        BinaryPrimitives.WriteUInt32LittleEndian(message, Magic);
        BinaryPrimitives.WriteInt32LittleEndian(message[4..], block.Share);
        BinaryPrimitives.WriteInt32LittleEndian(message[8..], block.First);
        BinaryPrimitives.WriteInt32LittleEndian(message[12..], block.Count);
        BinaryPrimitives.WriteInt32LittleEndian(message[16..], length);
    }

    /// <summary>Reads a header; throws <see cref="InvalidDataException"/> for anything that is not a block of this plan.</summary>
    public static (int Share, int First, int Count, int Length) ReadHeader(ReadOnlySpan<byte> message, FanoutPlan plan)
    {
        if (message.Length < HeaderLength || BinaryPrimitives.ReadUInt32LittleEndian(message) != Magic)
            throw new InvalidDataException("not a fan-out block message");
        var share = BinaryPrimitives.ReadInt32LittleEndian(message[4..]);
        var first = BinaryPrimitives.ReadInt32LittleEndian(message[8..]);
        var count = BinaryPrimitives.ReadInt32LittleEndian(message[12..]);
        var length = BinaryPrimitives.ReadInt32LittleEndian(message[16..]);
        if (share < 0 || share >= plan.Ranks || first < 0 || count < 1 || first + count > plan.Manifest.Segments.Count || length < HeaderLength || length > message.Length)
            throw new InvalidDataException($"block message out of range (share {share}, segments {first}+{count}, {length} bytes)");
        return (share, first, count, length);
    }

    /// <summary>The records of a message, in order: segment index and its stored bytes (a slice of the message).</summary>
    public static IEnumerable<(int Index, ReadOnlyMemory<byte> Stored)> Records(ReadOnlyMemory<byte> message, FanoutPlan plan) =>
        Layout(message, plan).Select(r => (r.Index, message.Slice(r.Offset, r.Length)));

    /// <summary>Where each record's stored bytes lie in the message.</summary>
    public static IEnumerable<(int Index, int Offset, int Length)> Layout(ReadOnlyMemory<byte> message, FanoutPlan plan)
    {
        var (_, first, count, length) = ReadHeader(message.Span, plan);
        var at = HeaderLength;
        for (var i = 0; i < count; i++)
        {
            if (at + RecordHeaderLength > length) throw new InvalidDataException("block message ends inside a record header");
            var index = BinaryPrimitives.ReadInt32LittleEndian(message.Span[at..]);
            var stored = BinaryPrimitives.ReadInt32LittleEndian(message.Span[(at + 4)..]);
            at += RecordHeaderLength;
            if (index != first + i || stored < 0 || at + stored > length) throw new InvalidDataException($"block message record {i} is malformed");
            yield return (index, at, stored);
            at += stored;
        }
    }

    public static int WriteRecord(Span<byte> destination, int index, ReadOnlySpan<byte> stored)
    {
        BinaryPrimitives.WriteInt32LittleEndian(destination, index);
        BinaryPrimitives.WriteInt32LittleEndian(destination[4..], stored.Length);
        stored.CopyTo(destination[RecordHeaderLength..]);
        return RecordHeaderLength + stored.Length;
    }
}
