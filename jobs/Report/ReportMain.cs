namespace Hpc.Jobs.Report;

public static class ReportMain
{
    public static int Run(string[] args) { Console.Error.WriteLine("not yet"); return 1; }
}
