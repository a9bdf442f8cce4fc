using Hpc.CommonData.Cli;

namespace Hpc.Jobs.Tests;

/// <summary>The one progress line <c>get</c> and <c>nodeprep</c> show on a terminal while bytes move.</summary>
public sealed class ProgressLineTests
{
    [Fact]
    public void Says_how_much_of_how_much_and_how_fast_in_the_units_every_size_is_printed_in()
    {
        Assert.Equal("fetching risk/a: 42.2% 108 MiB of 256 MiB, 95 MiB/s", ProgressLine.Text("fetching risk/a", 108L << 20, 256L << 20, 95 << 20));
        Assert.Equal("writing out.bin: 1.5 KiB", ProgressLine.Text("writing out.bin", 1536, 0, double.NaN));
    }

    [Fact]
    public void Overwrites_itself_and_leaves_nothing_behind_when_cleared()
    {
        var output = new StringWriter();
        var line = ProgressLine.To(output);
        line.Show("writing x", 100L << 20, 200L << 20);
        line.Show("writing x", 200L << 20, 200L << 20, force: true);
        var shown = output.ToString();
        Assert.StartsWith("\rwriting x: 50.0% 100 MiB of 200 MiB", shown);
        Assert.Contains("\rwriting x: 100.0% 200 MiB of 200 MiB", shown);
        Assert.DoesNotContain('\n', shown);
        line.Clear();
        Assert.EndsWith("\r", output.ToString());
    }
}
