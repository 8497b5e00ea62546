// The console's lists: a cell whose value the stylesheet clips carries the whole value in its
// title, so it reads on hover.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("#result_list td, #result_list th").forEach(function (cell) {
    if (cell.scrollWidth > cell.clientWidth && !cell.title) {
      cell.title = cell.textContent.trim();
    }
  });
});
