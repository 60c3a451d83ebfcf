/* The body of a function (Selenium's execute_script) for tests/browser/test_studio.py: what breaks the
   page's layout at the window's width, as a list of sentences (empty: nothing). That is the page
   scrolling sideways; any element of the header or the main content whose box passes the viewport's
   edges, unless it is inside a .table-scroll box (which scrolls sideways on purpose); any table cell
   narrower than its longest word (a column squeezed to a letter or two a line). The transcript column
   breaks inside words on purpose. */
const width = document.documentElement.clientWidth;
const found = [];
const name = (e) =>
  e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.className ? "." + e.className : "");
if (document.documentElement.scrollWidth > window.innerWidth) {
  found.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} > ${window.innerWidth}`);
}
for (const e of document.querySelectorAll("header *, main *")) {
  const box = e.getBoundingClientRect();
  if (!e.getClientRects().length || box.width === 0) continue;
  if (e.parentElement && e.parentElement.closest(".table-scroll")) continue;
  if (e.closest(".visually-hidden")) continue;
  if (box.right > width + 0.5 || box.left < -0.5) {
    found.push(`${name(e)} spans ${box.left}..${box.right} of ${width}`);
  }
}
const pen = document.createElement("canvas").getContext("2d");
for (const cell of document.querySelectorAll("main th, main td")) {
  if (!cell.getClientRects().length || cell.classList.contains("transcript")) continue;
  const style = getComputedStyle(cell);
  pen.font = style.font;
  const words = cell.innerText.split(/\s+|(?<=-)/).filter(Boolean);  // a line may break after a hyphen
  const need = Math.max(0, ...words.map((w) => pen.measureText(w).width));
  const room = cell.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  if (room + 1 < need) found.push(`${name(cell)} "${cell.innerText}" is ${room} px wide, its words ${need}`);
}
return found;
