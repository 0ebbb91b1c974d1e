<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\AppInfo;

use OCP\BackgroundJob\TimedJob;
use OCP\Migration\IRepairStep;
use PHPUnit\Framework\TestCase;
use Symfony\Component\Console\Command\Command;

class InfoXmlTest extends TestCase {
	private const INFO_XML = ISTOTA_REPO_ROOT . '/appinfo/info.xml';

	/** The app store's schema; ISTOTA_INFO_XSD overrides where it is kept. */
	private static function schema(): string {
		// The project's shared/ folder sits beside the repository (also in CI).
		return getenv('ISTOTA_INFO_XSD') ?: dirname(ISTOTA_REPO_ROOT) . '/shared/reference/app-info.xsd';
	}

	public function testValidatesAgainstTheAppStoreSchema(): void {
		if (!is_file(self::schema())) {
			$this->fail('app store schema not found at ' . self::schema() . '; set ISTOTA_INFO_XSD');
		}
		exec(sprintf('xmllint --noout --schema %s %s 2>&1', escapeshellarg(self::schema()), escapeshellarg(self::INFO_XML)), $output, $code);
		$this->assertSame(0, $code, implode("\n", $output));
	}

	public function testDeclaresTheTarget(): void {
		$info = simplexml_load_file(self::INFO_XML);
		$this->assertSame('istota', (string)$info->id);
		$this->assertSame('Istota', (string)$info->namespace);
		$this->assertSame('31', (string)$info->dependencies->nextcloud['min-version']);
		$this->assertSame('34', (string)$info->dependencies->nextcloud['max-version']);
		$this->assertSame('8.1', (string)$info->dependencies->php['min-version']);
		$this->assertSame('AGPL-3.0-or-later', (string)$info->licence);
		$this->assertFileExists(ISTOTA_REPO_ROOT . '/img/app.svg');
	}

	public function testEveryDeclaredClassExistsWithTheRightType(): void {
		$info = simplexml_load_file(self::INFO_XML);
		$jobs = array_map('strval', iterator_to_array($info->{'background-jobs'}->job, false));
		$steps = [];
		foreach (['install', 'post-migration'] as $kind) {
			$steps[$kind] = array_map('strval', iterator_to_array($info->{'repair-steps'}->{$kind}->step, false));
		}
		$commands = array_map('strval', iterator_to_array($info->commands->command, false));

		$this->assertSame(['OCA\Istota\BackgroundJob\FlushOutbox'], $jobs);
		$this->assertSame(['OCA\Istota\Migration\InstallBot', 'OCA\Istota\Migration\RestoreSidecarPermissions'], $steps['install']);
		$this->assertSame(['OCA\Istota\Migration\InstallBot', 'OCA\Istota\Migration\RestoreSidecarPermissions', 'OCA\Istota\Migration\MoveAllowedGroupsToSidecar'], $steps['post-migration']);
		foreach ($jobs as $class) {
			$this->assertTrue(is_subclass_of($class, TimedJob::class), $class);
		}
		foreach (array_merge(...array_values($steps)) as $class) {
			$this->assertTrue(is_subclass_of($class, IRepairStep::class), $class);
		}
		$names = [];
		foreach ($commands as $class) {
			$this->assertTrue(is_subclass_of($class, Command::class), $class);
			// Built the way DI would, with doubles for the services; only the name matters here.
			$arguments = [];
			foreach ((new \ReflectionClass($class))->getConstructor()->getParameters() as $parameter) {
				$arguments[] = $this->createMock((string)$parameter->getType());
			}
			$names[] = (new $class(...$arguments))->getName();
		}
		$this->assertSame(['istota:setup', 'istota:self-test'], $names);
	}
}
