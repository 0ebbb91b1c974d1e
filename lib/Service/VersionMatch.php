<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

/**
 * VersionMatch compares the app's version with the sidecar's. The release tarball ships
 * the sidecar binary built with the app's version, so a difference in major, minor or
 * patch means the sidecar was not restarted (or not replaced) after an update. Pre-release
 * and build suffixes ("0.1.0-dev", "v0.1.0+abc") and a leading "v" are ignored.
 */
final class VersionMatch {
	/** "x.y.z" of a version, or null when it has none. */
	public static function core(string $version): ?string {
		if (preg_match('/^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+].*)?$/', trim($version), $m) !== 1) {
			return null;
		}
		return sprintf('%d.%d.%d', (int)$m[1], (int)$m[2], (int)($m[3] ?? 0));
	}

	public static function matches(string $appVersion, string $sidecarVersion): bool {
		$app = self::core($appVersion);
		return $app !== null && $app === self::core($sidecarVersion);
	}
}
