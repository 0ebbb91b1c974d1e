<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP;

interface IURLGenerator {
	public function linkToRoute(string $routeName, array $arguments = []): string;

	public function linkToRouteAbsolute(string $routeName, array $arguments = []): string;

	public function imagePath(string $appName, string $file): string;

	public function getAbsoluteURL(string $url): string;
}
