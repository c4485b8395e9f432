package bench

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// palette is a small colour-blind-friendly set (Okabe-Ito).
var palette = []color.Color{
	color.RGBA{0, 114, 178, 255},   // blue
	color.RGBA{230, 159, 0, 255},   // orange
	color.RGBA{0, 158, 115, 255},   // green
	color.RGBA{204, 121, 167, 255}, // purple
	color.RGBA{86, 180, 233, 255},  // sky
	color.RGBA{213, 94, 0, 255},    // vermillion
}

// series is one named row of values, one value per group.
type series struct {
	Name   string
	Values []float64
}

// barChart writes a grouped bar chart: one group per label, one bar per
// series. logY draws the y axis on a log scale (values must be > 0).
func barChart(dir, file, title, ylabel string, groups []string, ss []series, logY bool) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	w := vg.Points(math.Max(8, 60/float64(max(1, len(ss)))))
	for i, s := range ss {
		vals := make(plotter.Values, len(s.Values))
		for j, v := range s.Values {
			if logY && v <= 0 {
				v = math.SmallestNonzeroFloat32 // log scale cannot show zero
			}
			vals[j] = v
		}
		bc, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return fmt.Errorf("bench: chart %s: %w", file, err)
		}
		bc.LineStyle.Width = 0
		bc.Color = palette[i%len(palette)]
		bc.Offset = w * vg.Length(float64(i)-float64(len(ss)-1)/2)
		p.Add(bc)
		p.Legend.Add(s.Name, bc)
	}
	p.Legend.Top = true
	p.NominalX(groups...)
	if logY {
		// Keep the bottom of the axis readable.
		lo := math.Inf(1)
		for _, s := range ss {
			for _, v := range s.Values {
				if v > 0 {
					lo = math.Min(lo, v)
				}
			}
		}
		if !math.IsInf(lo, 1) {
			p.Y.Min = lo / 2
		}
	}
	return save(p, dir, file)
}

// lineChart writes one line per series over shared x values.
func lineChart(dir, file, title, xlabel, ylabel string, xs []float64, ss []series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	for i, s := range ss {
		pts := make(plotter.XYs, 0, len(xs))
		for j, x := range xs {
			if j < len(s.Values) && !math.IsNaN(s.Values[j]) {
				pts = append(pts, plotter.XY{X: x, Y: s.Values[j]})
			}
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("bench: chart %s: %w", file, err)
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.5)
		sc.Color = palette[i%len(palette)]
		p.Add(l, sc)
		p.Legend.Add(s.Name, l, sc)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	return save(p, dir, file)
}

// histogram writes the distribution of values in n bins.
func histogram(dir, file, title, xlabel string, values []float64, n int) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = "count"
	h, err := plotter.NewHist(plotter.Values(values), n)
	if err != nil {
		return fmt.Errorf("bench: chart %s: %w", file, err)
	}
	h.FillColor = palette[0]
	h.LineStyle.Width = 0
	p.Add(h)
	return save(p, dir, file)
}

func save(p *plot.Plot, dir, file string) error {
	if err := p.Save(16*vg.Centimeter, 9*vg.Centimeter, filepath.Join(dir, file)); err != nil {
		return fmt.Errorf("bench: chart %s: %w", file, err)
	}
	return nil
}
