namespace Hpc.Jobs.Commands;

public static class ReportCommand
{
    public static Task<int> RunAsync(string[] args) => Task.FromResult(Hpc.Jobs.Report.ReportMain.Run(args));
}
