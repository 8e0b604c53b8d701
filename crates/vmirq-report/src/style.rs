//! The look shared by every report: the page's style sheet, the plot palette and font sizes.

/// The style sheet of every page. Tables: left-aligned label columns (`td.l`), right-aligned
/// numbers, long text wrapped, a line between groups of rows, scrolling sideways when wider
/// than the page. Plots wrap in rows.
pub const CSS: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;\
margin:1.5em 2em;max-width:1400px;color:#222;line-height:1.4}\
h1{margin:0 0 .3em}h2{margin:1.6em 0 .4em;border-bottom:1px solid #ddd;padding-bottom:.2em}\
h3{margin:1.2em 0 .3em}\
nav{font-size:14px;margin:.4em 0 1em}nav a{margin-right:1.2em;color:#1f5fa8}\
table{border-collapse:collapse;font-size:12.5px;margin:.3em 0 1em}\
th,td{border:1px solid #d4d4d4;padding:2px 7px;text-align:right;white-space:nowrap}\
th{background:#f2f2f2}td.l,th.l{text-align:left}\
tbody tr:nth-child(even){background:#fafafa}tr.group td{border-top:2px solid #888}\
.table{overflow-x:auto;max-width:100%}\
td.good{color:#17692f;font-weight:600}td.bad{color:#b3261e;font-weight:600}\
td.strong{font-weight:600}td.muted{color:#888}\
td.wrap{white-space:normal;text-align:left;min-width:24ch;max-width:60ch}\
table.facts tbody tr{background:none}table.facts th{text-align:left;background:none;border:none;padding:1px 12px 1px 0}\
table.facts td{text-align:left;border:none;padding:1px 0;white-space:normal}\
.plots{display:flex;flex-wrap:wrap;gap:14px;align-items:flex-start}\
.plots svg{max-width:100%;height:auto;border:1px solid #e4e4e4}\
p.note{color:#555;font-size:13px;max-width:95ch}\
ul.notices li{color:#b3261e}\
pre{font-size:11.5px;background:#f7f7f7;padding:.6em;overflow:auto}\
code{font-size:92%}";

/// Series colours, in order: distinguishable on white and in grey print (Tableau 10, then
/// darker variants).
pub const PALETTE: [(u8, u8, u8); 14] = [
    (0x1f, 0x77, 0xb4),
    (0xd6, 0x27, 0x28),
    (0x2c, 0xa0, 0x2c),
    (0xff, 0x7f, 0x0e),
    (0x94, 0x67, 0xbd),
    (0x8c, 0x56, 0x4b),
    (0xe3, 0x77, 0xc2),
    (0x7f, 0x7f, 0x7f),
    (0xbc, 0xbd, 0x22),
    (0x17, 0xbe, 0xcf),
    (0x39, 0x3b, 0x79),
    (0xad, 0x49, 0x4a),
    (0x63, 0x79, 0x39),
    (0xe7, 0x96, 0x9c),
];

/// Font family written into the SVG (the browser picks the font).
pub const FONT: &str = "sans-serif";
/// Plot title size (plotters' unit: the SVG font size is this divided by 1.24).
pub const TITLE_PT: f64 = 17.0;
/// Tick label size.
pub const TICK_PT: f64 = 14.0;
/// Axis description size.
pub const AXIS_PT: f64 = 15.0;
/// Legend entry size.
pub const LEGEND_PT: f64 = 14.0;
/// Approximate width in pixels of one character at [`TICK_PT`] / [`LEGEND_PT`] (for room
/// reserved for labels; the browser's exact metrics are unknown when the SVG is written).
pub const CHAR_PX: f64 = 6.6;
