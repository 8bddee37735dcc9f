; NSIS installer for LLM Lens on Windows: wraps the PyInstaller folder built from
; packaging/llm-lens.spec (llm-lens.exe for the console, "LLM Lens.exe" for the window).
;
;   makensis /DVERSION=0.1.0 packaging\windows\llm-lens.nsi
;
; makensis changes into this script's folder, so relative paths (the defaults below, and any
; given with /DDIST_DIR=, /DOUTFILE=, /DICON=) are relative to packaging\windows; give absolute
; paths to build from elsewhere. The defaults take build\pyinstaller\dist\llm-lens (what
; pyinstaller packaging\llm-lens.spec --distpath build\pyinstaller\dist writes) and write
; dist\llm-lens-<version>-setup.exe.

Unicode true
SetCompressor /SOLID lzma
RequestExecutionLevel admin

!ifndef VERSION
  !define VERSION "0.1.0"
!endif
!ifndef DIST_DIR
  !define DIST_DIR "..\..\build\pyinstaller\dist\llm-lens"
!endif
!ifndef OUTFILE
  !define OUTFILE "..\..\dist\llm-lens-${VERSION}-setup.exe"
!endif
!ifndef ICON
  !define ICON "..\..\resources\icons\llm-lens.ico"
!endif

!define APP_NAME "LLM Lens"
!define APP_EXE "LLM Lens.exe"
!define UNINST_KEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\llm-lens"

!include "MUI2.nsh"
!include "x64.nsh"

Name "${APP_NAME} ${VERSION}"
OutFile "${OUTFILE}"
InstallDir "$PROGRAMFILES64\${APP_NAME}"
InstallDirRegKey HKLM "${UNINST_KEY}" "InstallLocation"
BrandingText "${APP_NAME} ${VERSION}"

!define MUI_ICON "${ICON}"
!define MUI_UNICON "${ICON}"
!define MUI_ABORTWARNING
!define MUI_FINISHPAGE_RUN "$INSTDIR\${APP_EXE}"

!insertmacro MUI_PAGE_WELCOME
!insertmacro MUI_PAGE_DIRECTORY
!insertmacro MUI_PAGE_INSTFILES
!insertmacro MUI_PAGE_FINISH
!insertmacro MUI_UNPAGE_CONFIRM
!insertmacro MUI_UNPAGE_INSTFILES
!insertmacro MUI_LANGUAGE "English"

VIProductVersion "${VERSION}.0"
VIAddVersionKey /LANG=${LANG_ENGLISH} "ProductName" "${APP_NAME}"
VIAddVersionKey /LANG=${LANG_ENGLISH} "ProductVersion" "${VERSION}"
VIAddVersionKey /LANG=${LANG_ENGLISH} "FileVersion" "${VERSION}"
VIAddVersionKey /LANG=${LANG_ENGLISH} "FileDescription" "${APP_NAME} installer"
VIAddVersionKey /LANG=${LANG_ENGLISH} "LegalCopyright" "MIT licence; bundled components under their own"

Function .onInit
  ${IfNot} ${RunningX64}
    MessageBox MB_ICONSTOP "${APP_NAME} needs 64-bit Windows."
    Abort
  ${EndIf}
  SetRegView 64
FunctionEnd

Function un.onInit
  SetRegView 64
FunctionEnd

Section "LLM Lens" SecMain
  SectionIn RO
  SetOutPath "$INSTDIR"
  File /r "${DIST_DIR}\*.*"
  WriteUninstaller "$INSTDIR\uninstall.exe"

  CreateShortcut "$SMPROGRAMS\${APP_NAME}.lnk" "$INSTDIR\${APP_EXE}" "" "$INSTDIR\${APP_EXE}" 0

  WriteRegStr HKLM "${UNINST_KEY}" "DisplayName" "${APP_NAME}"
  WriteRegStr HKLM "${UNINST_KEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr HKLM "${UNINST_KEY}" "Publisher" "LLM Lens maintainers"
  WriteRegStr HKLM "${UNINST_KEY}" "DisplayIcon" "$INSTDIR\${APP_EXE}"
  WriteRegStr HKLM "${UNINST_KEY}" "InstallLocation" "$INSTDIR"
  WriteRegStr HKLM "${UNINST_KEY}" "UninstallString" '"$INSTDIR\uninstall.exe"'
  WriteRegStr HKLM "${UNINST_KEY}" "QuietUninstallString" '"$INSTDIR\uninstall.exe" /S'
  WriteRegDWORD HKLM "${UNINST_KEY}" "NoModify" 1
  WriteRegDWORD HKLM "${UNINST_KEY}" "NoRepair" 1
SectionEnd

Section "Uninstall"
  ; The install folder holds only what the installer put there: the dequantized model and the
  ; settings live in the user's %LOCALAPPDATA% and registry, and are left to the user.
  Delete "$SMPROGRAMS\${APP_NAME}.lnk"
  RMDir /r "$INSTDIR\_internal"
  Delete "$INSTDIR\llm-lens.exe"
  Delete "$INSTDIR\${APP_EXE}"
  Delete "$INSTDIR\uninstall.exe"
  RMDir "$INSTDIR"
  DeleteRegKey HKLM "${UNINST_KEY}"
SectionEnd
