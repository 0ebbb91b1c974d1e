<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\IURLGenerator;

/**
 * URLs of a test instance at $base (e.g. "https://cloud.example.com/nextcloud"), shaped
 * as Nextcloud builds them with pretty URLs off: routes below /index.php, images below
 * /apps/<app>/img.
 */
final class TestUrlGenerator implements IURLGenerator {
	public function __construct(
		public string $base = 'https://cloud.example.com',
	) {
	}

	public function linkToRoute(string $routeName, array $arguments = []): string {
		$path = (string)parse_url($this->base, PHP_URL_PATH);
		$query = $arguments === [] ? '' : '?' . http_build_query($arguments, '', '&', PHP_QUERY_RFC3986);
		return rtrim($path, '/') . '/index.php/route/' . $routeName . $query;
	}

	public function linkToRouteAbsolute(string $routeName, array $arguments = []): string {
		return $this->getAbsoluteURL($this->linkToRoute($routeName, $arguments));
	}

	public function imagePath(string $appName, string $file): string {
		return rtrim((string)parse_url($this->base, PHP_URL_PATH), '/') . '/apps/' . $appName . '/img/' . $file;
	}

	public function getAbsoluteURL(string $url): string {
		$path = (string)parse_url($this->base, PHP_URL_PATH);
		$origin = substr($this->base, 0, strlen($this->base) - strlen($path));
		if ($path !== '' && str_starts_with($url, rtrim($path, '/') . '/')) {
			return $origin . $url;
		}
		return rtrim($this->base, '/') . '/' . ltrim($url, '/');
	}
}
