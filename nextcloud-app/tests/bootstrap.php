<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * PHPUnit bootstrap: no Nextcloud server and no Composer. The app's classes come from lib/,
 * OCP, Talk and Doctrine DBAL from the hand-written stubs in tests/stubs/ (OCP stable31 and
 * Talk 21 signatures, only what the app uses), Symfony Console and PSR from Debian's
 * /usr/share/php (php-symfony-console, php-psr-log, php-psr-container).
 *
 * With ISTOTA_TEST_WITHOUT_TALK=1 in the environment the Talk stubs are not loadable, as on
 * a server without Talk; the autoloader reads it at each lookup so a test in a separate
 * process can set it with putenv() before touching any Talk class.
 */

define('ISTOTA_REPO_ROOT', dirname(__DIR__, 2));

foreach ([
	'/usr/share/php/Symfony/Component/Console/autoload.php',
	'/usr/share/php/Psr/Log/autoload.php',
	'/usr/share/php/Psr/Container/autoload.php',
] as $debianAutoloader) {
	if (!is_file($debianAutoloader)) {
		fwrite(STDERR, "missing $debianAutoloader: apt-get install php-symfony-console php-psr-log php-psr-container\n");
		exit(1);
	}
	require_once $debianAutoloader;
}

spl_autoload_register(static function (string $class): void {
	$prefixes = [
		'OCA\\Istota\\Tests\\' => __DIR__ . '/',
		'OCA\\Istota\\' => ISTOTA_REPO_ROOT . '/lib/',
		'OCA\\Talk\\' => __DIR__ . '/stubs/OCA/Talk/',
		'OCP\\' => __DIR__ . '/stubs/OCP/',
		'Doctrine\\DBAL\\' => __DIR__ . '/stubs/Doctrine/DBAL/',
	];
	foreach ($prefixes as $prefix => $dir) {
		if (!str_starts_with($class, $prefix)) {
			continue;
		}
		if ($prefix === 'OCA\\Talk\\' && getenv('ISTOTA_TEST_WITHOUT_TALK') === '1') {
			return;
		}
		$file = $dir . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
		if (is_file($file)) {
			require $file;
		}
		return;
	}
});
