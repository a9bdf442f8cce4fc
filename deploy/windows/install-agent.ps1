# Installs the node agent of a Windows compute node as a Windows service (run as Administrator).
# The service runs the agent program directly (not through hpcdata), so the service control manager talks to it.
param(
    [string]$ToolPath = "C:\Program Files\hpcdata",
    [string]$Settings = "C:\ProgramData\hpcdata\agent.json",
    [string]$Account = "NT SERVICE\hpcdata-agent"
)
$ErrorActionPreference = "Stop"
dotnet tool update --tool-path $ToolPath hpcdata
$program = Get-ChildItem -Path (Join-Path $ToolPath ".store\hpcdata") -Recurse -Filter Hpc.NodeAgent.dll |
    Sort-Object LastWriteTime -Descending | Select-Object -First 1
if (-not $program) { throw "Hpc.NodeAgent.dll not found under $ToolPath" }
$dotnet = (Get-Command dotnet).Source
if (Get-Service hpcdata-agent -ErrorAction SilentlyContinue) { Stop-Service hpcdata-agent; sc.exe delete hpcdata-agent | Out-Null }
New-Service -Name hpcdata-agent -DisplayName "HPC Common Data node agent" -StartupType Automatic `
    -BinaryPathName "`"$dotnet`" `"$($program.FullName)`""
# Settings and the password file's path come from the service's environment, never its command line.
$env = @("HPCDATA_SETTINGS=$Settings", "HPCDATA_CACHE_PASSWORD_FILE=C:\ProgramData\hpcdata\secrets\agent-cache-password")
Set-ItemProperty -Path "HKLM:\SYSTEM\CurrentControlSet\Services\hpcdata-agent" -Name Environment -Type MultiString -Value $env
sc.exe config hpcdata-agent obj= $Account | Out-Null
sc.exe failure hpcdata-agent reset= 86400 actions= restart/5000 | Out-Null
Start-Service hpcdata-agent
